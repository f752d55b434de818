#include "meshtrain/kernels/cpu/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "meshtrain/core/error.h"
#include "support/numeric.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;

TEST(CrossEntropy, HandComputedSumAndCount) {
  std::vector<double> logits = {0, 0, 0, 1, 2, 3, 0, 0, 0};
  std::vector<int32_t> targets = {0, 2, -1};  // last row unsupervised
  auto r = cross_entropy_forward(logits.data(), targets.data(), 3, 3);
  EXPECT_EQ(r.count, 2);
  EXPECT_NEAR(r.loss_sum, std::log(3.0) + 0.40760596444438013, 1e-15);
  std::vector<float> lf(logits.begin(), logits.end());
  auto rf = cross_entropy_forward(lf.data(), targets.data(), 3, 3);
  EXPECT_NEAR(rf.loss_sum, r.loss_sum, 1e-6);
}

TEST(CrossEntropy, StableForHugeLogits) {
  std::vector<float> logits = {1000.0f, 1001.0f, -1000.0f, 3e4f, -3e4f, 0.0f};
  std::vector<int32_t> targets = {0, 1};
  std::vector<float> g(6);
  auto r = cross_entropy_forward_backward(logits.data(), targets.data(), 2, 3, 1.0f, g.data());
  EXPECT_NEAR(r.loss_sum, std::log1p(std::exp(1.0)) + 6e4, 1e-1);
  EXPECT_NEAR(cross_entropy_forward(logits.data(), targets.data(), 1, 3).loss_sum, std::log1p(std::exp(1.0)), 1e-6);
  for (float v : g) EXPECT_TRUE(std::isfinite(v));
}

TEST(CrossEntropy, FusedGradientMatchesFiniteDifferences) {
  const int64_t n = 4, V = 7;
  auto x = random_vec(n * V, 1, -3, 3);
  std::vector<int32_t> targets = {3, -1, 0, 6};
  const double scale = 1.0 / 3;  // 1/N, N = supervised count, docs/math.md (M.5)-(M.6)
  auto loss = [&](const std::vector<double>& v) {
    return scale * cross_entropy_forward(v.data(), targets.data(), n, V).loss_sum;
  };
  std::vector<double> g(n * V, 42.0);  // OVERWRITTEN, unsupervised row zeroed
  auto r = cross_entropy_forward_backward(x.data(), targets.data(), n, V, scale, g.data());
  EXPECT_EQ(r.count, 3);
  EXPECT_DOUBLE_EQ(r.loss_sum, cross_entropy_forward(x.data(), targets.data(), n, V).loss_sum);
  EXPECT_LT(testing::max_rel_diff(g, testing::finite_difference(loss, x), 1e-2), 1e-6);
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(g[V + j], 0.0);
}

TEST(CrossEntropy, InPlaceAliasingAndThreadCountsAgree) {
  const int64_t n = 64, V = 1000;  // n * V above the parallel threshold
  auto x = random_vec<float>(n * V, 2, -5, 5);
  std::vector<int32_t> targets(n);
  for (int64_t i = 0; i < n; ++i) targets[i] = i % 5 == 0 ? -1 : int32_t((i * 131) % V);
  auto run = [&](int threads) {
    std::vector<float> g(n * V);
    auto r = test::with_threads(threads, [&] {
      return cross_entropy_forward_backward(x.data(), targets.data(), n, V, 0.01f, g.data());
    });
    return std::make_pair(r.loss_sum, g);
  };
  auto one = run(1), two = run(2);
  EXPECT_EQ(one.first, two.first);  // bitwise: row losses are summed in row order
  EXPECT_EQ(one.second, two.second);
  auto y = x;
  auto r = cross_entropy_forward_backward(y.data(), targets.data(), n, V, 0.01f, y.data());
  EXPECT_EQ(r.loss_sum, one.first);
  EXPECT_EQ(y, one.second);
  // float vs double
  auto xd = test::cast_vec<double>(x);
  std::vector<double> gd(n * V);
  auto rd = cross_entropy_forward_backward(xd.data(), targets.data(), n, V, 0.01, gd.data());
  EXPECT_NEAR(one.first, rd.loss_sum, 1e-6 * rd.loss_sum);
  EXPECT_LT(testing::max_abs_diff(test::cast_vec<double>(one.second), gd), 1e-8);
}

TEST(CrossEntropy, TargetOutsideVocabThrowsDataErrorNamingRowAndValue) {
  std::vector<float> logits(6), g(6);
  std::vector<int32_t> targets = {1, 3};
  try {
    cross_entropy_forward(logits.data(), targets.data(), 2, 3);
    FAIL() << "no throw";
  } catch (const DataError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("row 1"), std::string::npos) << m;
    EXPECT_NE(m.find("target 3"), std::string::npos) << m;
  }
  EXPECT_THROW(cross_entropy_forward_backward(logits.data(), targets.data(), 2, 3, 1.0f, g.data()), DataError);
}

TEST(CrossEntropy, NoSupervisedTargetsGivesZero) {
  std::vector<float> logits(6, 1.0f), g(6, 5.0f);
  std::vector<int32_t> targets = {-1, -100};
  auto r = cross_entropy_forward_backward(logits.data(), targets.data(), 2, 3, 1.0f, g.data());
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.loss_sum, 0.0);
  EXPECT_EQ(g, std::vector<float>(6, 0.0f));
}

}  // namespace
}  // namespace meshtrain::kernels
