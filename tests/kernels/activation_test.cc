#include "meshtrain/kernels/cpu/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "support/numeric.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;

TEST(SwiGlu, ForwardHandComputed) {
  std::vector<double> g = {0, 1, -1}, u = {5, 2, 1}, out(3);
  swiglu_forward(g.data(), u.data(), 3, out.data());
  EXPECT_EQ(out[0], 0.0);
  EXPECT_NEAR(out[1], 1.4621171572600098, 1e-15);  // 2 * sigmoid(1)
  EXPECT_NEAR(out[2], -1.0 / (1 + std::exp(1.0)), 1e-15);
}

TEST(SwiGlu, BackwardMatchesFiniteDifferencesAndOverwrites) {
  const int64_t n = 9;
  auto g = random_vec(n, 1, -4, 4), u = random_vec(n, 2), c = random_vec(n, 3);
  auto loss = [&](const std::vector<double>& gg, const std::vector<double>& uu) {
    std::vector<double> o(n);
    swiglu_forward(gg.data(), uu.data(), n, o.data());
    return test::dot(o, c);
  };
  std::vector<double> dg(n, 99.0), du(n, 99.0);  // OVERWRITTEN
  swiglu_backward(g.data(), u.data(), c.data(), n, dg.data(), du.data());
  EXPECT_LT(testing::max_rel_diff(dg, testing::finite_difference([&](auto& v) { return loss(v, u); }, g), 1e-2), 1e-6);
  EXPECT_LT(testing::max_rel_diff(du, testing::finite_difference([&](auto& v) { return loss(g, v); }, u), 1e-2), 1e-6);
}

TEST(Gelu, ForwardIsGpt2GeluNew) {
  std::vector<double> x = {1.0, -1.0, 2.0, 0.0}, y(4);
  gelu_forward(x.data(), 4, y.data());
  EXPECT_NEAR(y[0], 0.8411919906082768, 1e-15);
  EXPECT_NEAR(y[1], -0.15880800939172324, 1e-15);
  EXPECT_NEAR(y[2], 1.954597694087775, 1e-15);
  EXPECT_EQ(y[3], 0.0);
  std::vector<float> xf = {1.0f, -1.0f, 2.0f}, yf(3);
  gelu_forward(xf.data(), 3, yf.data());
  EXPECT_NEAR(yf[0], 0.8411919906082768, 2e-7);
  EXPECT_NEAR(yf[1], -0.15880800939172324, 2e-7);
}

TEST(Gelu, BackwardMatchesFiniteDifferencesAndOverwrites) {
  const int64_t n = 11;
  auto x = random_vec(n, 4, -5, 5), c = random_vec(n, 5);
  auto loss = [&](const std::vector<double>& xx) {
    std::vector<double> y(n);
    gelu_forward(xx.data(), n, y.data());
    return test::dot(y, c);
  };
  std::vector<double> dx(n, 99.0);
  gelu_backward(x.data(), c.data(), n, dx.data());
  EXPECT_LT(testing::max_rel_diff(dx, testing::finite_difference(loss, x), 1e-2), 1e-6);
}

TEST(Activations, FloatAgreesWithDoubleIncludingExtremes) {
  const int64_t n = 100000;  // above the parallel threshold
  auto a = random_vec(n, 6, -12, 12), b = random_vec(n, 7), d = random_vec(n, 8);
  a[0] = -200;
  a[1] = 200;
  a[2] = -90;
  a[3] = 90;
  auto af = test::cast_vec<float>(a), bf = test::cast_vec<float>(b), df = test::cast_vec<float>(d);
  std::vector<double> o(n), dg(n), du(n);
  std::vector<float> of(n), dgf(n), duf(n);
  swiglu_forward(a.data(), b.data(), n, o.data());
  swiglu_forward(af.data(), bf.data(), n, of.data());
  swiglu_backward(a.data(), b.data(), d.data(), n, dg.data(), du.data());
  swiglu_backward(af.data(), bf.data(), df.data(), n, dgf.data(), duf.data());
  // Absolute on values of size ~10: a few float ulps.
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(of), o, 1.0), 2e-6);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(dgf), dg, 1.0), 2e-6);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(duf), du, 1.0), 2e-6);
  gelu_forward(a.data(), n, o.data());
  gelu_forward(af.data(), n, of.data());
  gelu_backward(a.data(), d.data(), n, dg.data());
  gelu_backward(af.data(), df.data(), n, dgf.data());
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(of), o, 1.0), 2e-6);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(dgf), dg, 1.0), 2e-6);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(of[i]) && std::isfinite(dgf[i])) << a[i];
}

// The bf16 policy's operands written directly (Out = uint16_t): the bits of
// computing in f32 and converting after, at every level, over values that
// round up, down and to even, overflow to inf, and NaN.
TEST(Activations, Bf16OutputsAreTheF32ResultsConverted) {
  const int64_t n = 1000;
  std::vector<float> a = test::random_vec<float>(n, 4, -6, 6), b = test::random_vec<float>(n, 5, -3, 3),
                     d = test::random_vec<float>(n, 6, -2, 2);
  a[1] = std::numeric_limits<float>::quiet_NaN();
  b[2] = 3e38f, a[2] = 4.0f;  // silu(4) * 3e38 overflows to inf
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    auto expect_converted = [&](const std::vector<float>& f32, const std::vector<uint16_t>& direct, const char* what) {
      std::vector<uint16_t> converted(f32.size());
      convert_f32_to_bf16(f32.data(), converted.data(), int64_t(f32.size()));
      EXPECT_EQ(direct, converted) << what << " at " << isa_name(level);
    };
    std::vector<float> o(n), o2(n);
    std::vector<uint16_t> h(n), h2(n);
    swiglu_forward(a.data(), b.data(), n, o.data());
    swiglu_forward(a.data(), b.data(), n, h.data());
    expect_converted(o, h, "swiglu_forward");
    swiglu_backward(a.data(), b.data(), d.data(), n, o.data(), o2.data());
    swiglu_backward(a.data(), b.data(), d.data(), n, h.data(), h2.data());
    expect_converted(o, h, "swiglu_backward dgate");
    expect_converted(o2, h2, "swiglu_backward dup");
    gelu_forward(a.data(), n, o.data());
    gelu_forward(a.data(), n, h.data());
    expect_converted(o, h, "gelu_forward");
    gelu_backward(a.data(), d.data(), n, o.data());
    gelu_backward(a.data(), d.data(), n, h.data());
    expect_converted(o, h, "gelu_backward");
  }
}

}  // namespace
}  // namespace meshtrain::kernels
