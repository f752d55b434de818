#include "meshtrain/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "meshtrain/core/error.h"

namespace meshtrain::data {
namespace {

TEST(Sampler, EachEpochIsAPermutation) {
  DocumentSampler s(101, 5);
  std::vector<int64_t> prev;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> seen;
    for (int i = 0; i < 101; ++i) seen.push_back(s.next());
    EXPECT_EQ(seen, s.permutation(e));
    std::vector<int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(101);
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(sorted, iota);
    EXPECT_NE(seen, prev);
    EXPECT_NE(seen, iota);
    prev = seen;
  }
  EXPECT_EQ(s.state(), (SamplerState{5, 3, 0}));
}

TEST(Sampler, OrderIsAPureFunctionOfSeedAndEpoch) {
  DocumentSampler a(50, 9), b(50, 9), c(50, 10);
  EXPECT_EQ(a.permutation(4), b.permutation(4));
  EXPECT_NE(a.permutation(4), c.permutation(4));
}

TEST(Sampler, ResumesExactlyFromSavedCursorViaJson) {
  DocumentSampler a(37, 123);
  for (int i = 0; i < 60; ++i) a.next();  // mid second epoch
  const nlohmann::json saved = a.state();
  EXPECT_EQ(saved["epoch"], 1);
  EXPECT_EQ(saved["cursor"], 23);
  DocumentSampler b(37, 123);
  b.restore(nlohmann::json::parse(saved.dump()).get<SamplerState>());
  for (int i = 0; i < 200; ++i) ASSERT_EQ(a.next(), b.next()) << i;
}

TEST(Sampler, RestoreRejectsForeignState) {
  DocumentSampler a(10, 1);
  EXPECT_THROW(a.restore({2, 0, 0}), DataError);
  EXPECT_THROW(a.restore({1, 0, 10}), DataError);
  EXPECT_THROW(nlohmann::json({{"seed", 1}}).get<SamplerState>(), DataError);
}

TEST(Sampler, SequentialAndFinite) {
  DocumentSampler s(3, 0, /*shuffle=*/false, /*max_epochs=*/2);
  std::vector<int64_t> seen;
  for (int64_t d; (d = s.next()) >= 0;) seen.push_back(d);
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(s.exhausted());
  EXPECT_THROW(DocumentSampler(0, 0), DataError);
}

}  // namespace
}  // namespace meshtrain::data
