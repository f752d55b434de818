// Covers src/meshtrain/kernels/cpu/rope_table.cc.
#include "meshtrain/kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "meshtrain/core/error.h"
#include "support/numeric.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;

TEST(Rope, TableUsesThetaPowerMinus2iOverD) {
  auto t = make_rope_table(3, 4, 10000.0);  // inv_freq = {1, 0.01}
  ASSERT_EQ(t.half, 2);
  EXPECT_FLOAT_EQ(t.cos[2 * 2 + 0], float(std::cos(2.0)));
  EXPECT_FLOAT_EQ(t.sin[2 * 2 + 1], float(std::sin(0.02)));
  EXPECT_EQ(t.cos[0], 1.0f);
  EXPECT_EQ(t.sin[1], 0.0f);
}

TEST(Rope, RotateHalfHandComputed) {
  auto t = make_rope_table(4, 4, 10000.0);
  std::vector<double> x = {1, 2, 3, 4};
  std::vector<int32_t> pos = {1};
  rope_apply(x.data(), pos.data(), 1, 1, 4, t, false);
  // Double activations rotate by the double angles (the f64 policy's), not the f32 table's.
  const double c0 = t.cos64[2], s0 = t.sin64[2], c1 = t.cos64[3], s1 = t.sin64[3];
  EXPECT_EQ(c0, std::cos(1.0));
  EXPECT_EQ(s1, std::sin(0.01));
  EXPECT_EQ(t.cos[2], float(c0));
  // pairs (x0, x2) and (x1, x3)
  const std::vector<double> want = {1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 3 * c0 + 1 * s0, 4 * c1 + 2 * s1};
  EXPECT_LT(testing::max_abs_diff(x, want), 1e-15);
}

TEST(Rope, InverseIsTheBackwardOfForward) {
  const int64_t n = 5, heads = 3, hd = 8;
  auto t = make_rope_table(64, hd, 500000.0);
  std::vector<int32_t> pos = {0, 7, 63, 2, 7};  // packed documents restart positions
  auto x = random_vec(n * heads * hd, 1), c = random_vec(n * heads * hd, 2);
  auto loss = [&](std::vector<double> v) {
    rope_apply(v.data(), pos.data(), n, heads, hd, t, false);
    return test::dot(v, c);
  };
  auto g = c;
  rope_apply(g.data(), pos.data(), n, heads, hd, t, true);
  EXPECT_LT(testing::max_rel_diff(g, testing::finite_difference(loss, x), 1e-2), 1e-6);
  // Round trip: exact up to cos^2 + sin^2 = 1 in the double table.
  auto y = x;
  rope_apply(y.data(), pos.data(), n, heads, hd, t, false);
  rope_apply(y.data(), pos.data(), n, heads, hd, t, true);
  EXPECT_LT(testing::max_abs_diff(y, x), 1e-14);
}

TEST(Rope, FloatAgreesWithDouble) {
  const int64_t n = 256, heads = 4, hd = 64;  // above the parallel threshold
  auto t = make_rope_table(300, hd, 10000.0);
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = int32_t((i * 37) % 300);
  auto x = random_vec(n * heads * hd, 3);
  auto xf = test::cast_vec<float>(x);
  rope_apply(x.data(), pos.data(), n, heads, hd, t, false);
  rope_apply(xf.data(), pos.data(), n, heads, hd, t, false);
  EXPECT_LT(testing::max_abs_diff(test::cast_vec<double>(xf), x), 1e-6);
}

TEST(Rope, PositionOutsideTableThrows) {
  auto t = make_rope_table(4, 4, 10000.0);
  std::vector<float> x(8);
  std::vector<int32_t> pos = {0, 4};
  EXPECT_THROW(rope_apply(x.data(), pos.data(), 2, 1, 4, t, false), DataError);
  EXPECT_THROW(make_rope_table(4, 5, 10000.0), ConfigError);
}

}  // namespace
}  // namespace meshtrain::kernels
