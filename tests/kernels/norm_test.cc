#include "meshtrain/kernels/cpu/norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "support/numeric.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;
constexpr double kFloor = 1e-2, kTol = 1e-6;

TEST(RmsNorm, ForwardHandComputed) {
  std::vector<double> x = {1, 2, 3, 4}, w = {1, 1, 2, 0.5}, y(4), rstd(1);
  rmsnorm_forward(x.data(), w.data(), 1, 4, 0.0, y.data(), rstd.data());
  const double r = 1 / std::sqrt(30.0 / 4);
  EXPECT_NEAR(rstd[0], r, 1e-15);
  const std::vector<double> want = {r, 2 * r, 6 * r, 2 * r};
  EXPECT_LT(testing::max_abs_diff(y, want), 1e-15);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t n = 3, d = 7;
  const double eps = 1e-5;
  auto x = random_vec(n * d, 1), w = random_vec(d, 2, 0.5, 1.5), c = random_vec(n * d, 3);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww) {
    std::vector<double> y(n * d), r(n);
    rmsnorm_forward(xx.data(), ww.data(), n, d, eps, y.data(), r.data());
    return test::dot(y, c);
  };
  std::vector<double> y(n * d), r(n);
  rmsnorm_forward(x.data(), w.data(), n, d, eps, y.data(), r.data());
  std::vector<double> dx(n * d, 1.0), dw(d, -2.0);  // backward ACCUMULATES
  rmsnorm_backward(x.data(), w.data(), r.data(), c.data(), n, d, dx.data(), dw.data());
  for (auto& v : dx) v -= 1.0;
  for (auto& v : dw) v += 2.0;
  auto fx = testing::finite_difference([&](const std::vector<double>& v) { return loss(v, w); }, x);
  auto fw = testing::finite_difference([&](const std::vector<double>& v) { return loss(x, v); }, w);
  EXPECT_LT(testing::max_rel_diff(dx, fx, kFloor), kTol);
  EXPECT_LT(testing::max_rel_diff(dw, fw, kFloor), kTol);
}

TEST(LayerNorm, ForwardHandComputed) {
  std::vector<double> x = {1, 2, 3}, w = {1, 2, 1}, b = {0, 0, 10}, y(3), mean(1), rstd(1);
  layernorm_forward(x.data(), w.data(), b.data(), 1, 3, 0.0, y.data(), mean.data(), rstd.data());
  const double r = 1 / std::sqrt(2.0 / 3);
  EXPECT_DOUBLE_EQ(mean[0], 2.0);
  EXPECT_NEAR(rstd[0], r, 1e-15);
  EXPECT_LT(testing::max_abs_diff(y, {-r, 0, 10 + r}), 1e-14);
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t n = 3, d = 6;
  const double eps = 1e-5;
  auto x = random_vec(n * d, 4), w = random_vec(d, 5, 0.5, 1.5), b = random_vec(d, 6), c = random_vec(n * d, 7);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
    std::vector<double> y(n * d), m(n), r(n);
    layernorm_forward(xx.data(), ww.data(), bb.data(), n, d, eps, y.data(), m.data(), r.data());
    return test::dot(y, c);
  };
  std::vector<double> y(n * d), m(n), r(n);
  layernorm_forward(x.data(), w.data(), b.data(), n, d, eps, y.data(), m.data(), r.data());
  std::vector<double> dx(n * d, 0.5), dw(d, 0.5), db(d, 0.5);
  layernorm_backward(x.data(), w.data(), m.data(), r.data(), c.data(), n, d, dx.data(), dw.data(), db.data());
  for (auto* v : {&dx, &dw, &db})
    for (auto& e : *v) e -= 0.5;
  EXPECT_LT(testing::max_rel_diff(dx, testing::finite_difference([&](auto& v) { return loss(v, w, b); }, x), kFloor),
            kTol);
  EXPECT_LT(testing::max_rel_diff(dw, testing::finite_difference([&](auto& v) { return loss(x, v, b); }, w), kFloor),
            kTol);
  EXPECT_LT(testing::max_rel_diff(db, testing::finite_difference([&](auto& v) { return loss(x, w, v); }, b), kFloor),
            kTol);
}

TEST(Norms, FloatAgreesWithDoubleAndThreadCountsAgree) {
  const int64_t n = 300, d = 256;  // n * d above the parallel threshold
  auto x = random_vec(n * d, 8, -2, 2), w = random_vec(d, 9), b = random_vec(d, 10), dy = random_vec(n * d, 11);
  auto xf = test::cast_vec<float>(x), wf = test::cast_vec<float>(w), bf = test::cast_vec<float>(b),
       dyf = test::cast_vec<float>(dy);
  std::vector<double> y(n * d), m(n), r(n), dx(n * d), dw(d), db(d);
  layernorm_forward(x.data(), w.data(), b.data(), n, d, 1e-5, y.data(), m.data(), r.data());
  layernorm_backward(x.data(), w.data(), m.data(), r.data(), dy.data(), n, d, dx.data(), dw.data(), db.data());
  auto run_f = [&](int threads) {
    std::vector<float> yf(n * d), mf(n), rf(n), dxf(n * d), dwf(d), dbf(d);
    test::with_threads(threads, [&] {
      layernorm_forward(xf.data(), wf.data(), bf.data(), n, d, 1e-5f, yf.data(), mf.data(), rf.data());
      layernorm_backward(xf.data(), wf.data(), mf.data(), rf.data(), dyf.data(), n, d, dxf.data(), dwf.data(),
                         dbf.data());
      return 0;
    });
    return std::vector<std::vector<float>>{yf, dxf, dwf, dbf};
  };
  auto one = run_f(1), two = run_f(2);
  EXPECT_EQ(one, two);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(one[0]), y, 1.0), 1e-5);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(one[1]), dx, 1.0), 1e-5);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(one[2]), dw, 1.0), 1e-5);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(one[3]), db, 1.0), 1e-5);

  std::vector<double> ry(n * d), rr(n), rdx(n * d), rdw(d);
  rmsnorm_forward(x.data(), w.data(), n, d, 1e-6, ry.data(), rr.data());
  rmsnorm_backward(x.data(), w.data(), rr.data(), dy.data(), n, d, rdx.data(), rdw.data());
  std::vector<float> fy(n * d), fr(n), fdx(n * d), fdw(d);
  rmsnorm_forward(xf.data(), wf.data(), n, d, 1e-6f, fy.data(), fr.data());
  rmsnorm_backward(xf.data(), wf.data(), fr.data(), dyf.data(), n, d, fdx.data(), fdw.data());
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(fy), ry, 1.0), 1e-5);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(fdx), rdx, 1.0), 1e-5);
  EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(fdw), rdw, 1.0), 1e-5);
}

// The bf16 policy's normed operand written directly: the bits of the f32
// output converted, both norms, at every level.
TEST(Norms, Bf16OutputIsTheF32OutputConverted) {
  const int64_t n = 37, d = 96;
  const std::vector<float> x = test::random_vec<float>(size_t(n * d), 8, -3, 3), w = test::random_vec<float>(size_t(d), 9),
                           b = test::random_vec<float>(size_t(d), 10);
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    std::vector<float> y(x.size()), mean(n), rstd(n), mean16(n), rstd16(n);
    std::vector<uint16_t> direct(x.size()), converted(x.size());
    rmsnorm_forward(x.data(), w.data(), n, d, 1e-5f, y.data(), rstd.data());
    rmsnorm_forward(x.data(), w.data(), n, d, 1e-5f, direct.data(), rstd16.data());
    convert_f32_to_bf16(y.data(), converted.data(), n * d);
    EXPECT_EQ(direct, converted) << "rmsnorm at " << isa_name(level);
    EXPECT_EQ(rstd, rstd16);
    layernorm_forward(x.data(), w.data(), b.data(), n, d, 1e-5f, y.data(), mean.data(), rstd.data());
    layernorm_forward(x.data(), w.data(), b.data(), n, d, 1e-5f, direct.data(), mean16.data(), rstd16.data());
    convert_f32_to_bf16(y.data(), converted.data(), n * d);
    EXPECT_EQ(direct, converted) << "layernorm at " << isa_name(level);
    EXPECT_EQ(mean, mean16);
  }
}

}  // namespace
}  // namespace meshtrain::kernels
