#include "meshtrain/data/stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace meshtrain::data {
namespace {

TEST(Stats, UnigramEntropyOfTargets) {
  // Targets (every token but each document's first): 1 1 E 2 E.
  const TokenDataset ds = TokenDataset::from_documents({{256, 1, 1, 257}, {256, 2, 257}});
  const TokenStats s = compute_token_stats(ds);
  EXPECT_EQ(s.documents, 2);
  EXPECT_EQ(s.tokens, 7);
  EXPECT_EQ(s.targets, 5);
  EXPECT_EQ(s.min_doc_length, 3);
  EXPECT_EQ(s.max_doc_length, 4);
  EXPECT_EQ(s.distinct_ids, 3);
  const double h = -(2 * 0.4 * std::log(0.4) + 0.2 * std::log(0.2));
  EXPECT_NEAR(s.unigram_entropy_nats, h, 1e-12);
  EXPECT_NEAR(unigram_entropy(ds), h, 1e-12);
  const auto top = s.top(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0], (std::pair<int32_t, int64_t>{1, 2}));
  EXPECT_EQ(top[1], (std::pair<int32_t, int64_t>{257, 2}));
  EXPECT_EQ(unigram_entropy(std::vector<int64_t>{0, 0}), 0.0);
  EXPECT_NEAR(unigram_entropy(std::vector<int64_t>{5, 5, 5, 5}), std::log(4.0), 1e-12);
}

}  // namespace
}  // namespace meshtrain::data
