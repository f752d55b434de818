#include "meshtrain/kernels/cpu/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "support/numeric.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;

// The header's formula, element by element, in double.
void reference_step(std::vector<double>& p, const std::vector<double>& grad, std::vector<double>& m,
                    std::vector<double>& v, const AdamWHyper& h, double scale) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = grad[i] * scale;
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
    const double mh = m[i] / (1 - std::pow(h.beta1, double(h.step)));
    const double vh = v[i] / (1 - std::pow(h.beta2, double(h.step)));
    p[i] -= h.lr * (mh / (std::sqrt(vh) + h.eps) + h.weight_decay * p[i]);
  }
}

TEST(AdamW, FirstStepMovesBySignOfGradient) {
  std::vector<double> p = {1.0, -2.0}, g = {0.3, -4.0}, m(2), v(2);
  AdamWHyper h;
  h.lr = 0.1;
  h.eps = 0;
  h.weight_decay = 0.5;
  adamw_step(p.data(), g.data(), m.data(), v.data(), 2, h, 1.0);
  // m_hat = g, v_hat = g^2: update = sign(g) + wd p
  EXPECT_NEAR(p[0], 1.0 - 0.1 * (1 + 0.5 * 1.0), 1e-15);
  EXPECT_NEAR(p[1], -2.0 - 0.1 * (-1 + 0.5 * -2.0), 1e-15);
  EXPECT_NEAR(m[0], 0.1 * 0.3, 1e-16);
  EXPECT_NEAR(v[1], 0.05 * 16.0, 1e-15);
}

TEST(AdamW, MatchesReferenceOverSeveralStepsFloatAndDouble) {
  const int64_t n = 70003;  // above the parallel threshold, ragged vector tail
  AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.1;
  auto p = random_vec(n, 1), m = std::vector<double>(n), v = std::vector<double>(n);
  auto pd = p, md = m, vd = v;
  auto pf = test::cast_vec<float>(p), mf = test::cast_vec<float>(m), vf = test::cast_vec<float>(v);
  for (int64_t step = 1; step <= 5; ++step) {
    h.step = step;
    auto g = random_vec(n, uint32_t(10 + step));
    auto gf = test::cast_vec<float>(g);
    const double scale = 0.7;  // clip coefficient
    reference_step(p, g, m, v, h, scale);
    adamw_step(pd.data(), g.data(), md.data(), vd.data(), n, h, scale);
    adamw_step(pf.data(), gf.data(), mf.data(), vf.data(), n, h, float(scale));
  }
  EXPECT_LT(testing::max_abs_diff(pd, p), 1e-15);
  EXPECT_LT(testing::max_rel_diff(md, m, 1e-3), 1e-13);
  EXPECT_LT(testing::max_rel_diff(vd, v, 1e-6), 1e-13);
  EXPECT_LT(testing::max_abs_diff(test::cast_vec<double>(pf), p), 1e-6);
}

TEST(AdamW, IndependentOfThreadCount) {
  const int64_t n = 100001;
  AdamWHyper h;
  h.weight_decay = 0.01;
  h.step = 3;
  auto g = test::cast_vec<float>(random_vec(n, 2));
  auto run = [&](int threads) {
    auto p = test::cast_vec<float>(random_vec(n, 1));
    std::vector<float> m(n, 0.01f), v(n, 0.02f);
    test::with_threads(threads, [&] {
      adamw_step(p.data(), g.data(), m.data(), v.data(), n, h, 0.5f);
      return 0;
    });
    return std::vector<std::vector<float>>{p, m, v};
  };
  EXPECT_EQ(run(1), run(2));
}

// The bf16 compute copy written in the update's pass: the bits of the
// updated f32 master converted after, and the master itself unchanged by
// asking for it, at every level.
TEST(AdamW, Bf16CopyIsTheUpdatedMasterConverted) {
  const int64_t n = 4099;
  AdamWHyper h;
  h.weight_decay = 0.1;
  h.step = 2;
  const auto g = test::cast_vec<float>(random_vec(n, 3)), p0 = test::cast_vec<float>(random_vec(n, 4));
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    std::vector<float> p = p0, m(n, 0.01f), v(n, 0.02f), pc = p0, mc(n, 0.01f), vc(n, 0.02f);
    std::vector<uint16_t> fused(n, 0xffff), converted(n);
    adamw_step(p.data(), g.data(), m.data(), v.data(), n, h, 0.5f);
    adamw_step(pc.data(), g.data(), mc.data(), vc.data(), n, h, 0.5f, fused.data());
    convert_f32_to_bf16(p.data(), converted.data(), n);
    EXPECT_EQ(pc, p) << isa_name(level);
    EXPECT_EQ(fused, converted) << isa_name(level);
  }
}

}  // namespace
}  // namespace meshtrain::kernels
