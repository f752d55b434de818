#include "meshtrain/optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace meshtrain;

// Slices with per-slice weight decay update exactly like a scalar reference,
// and the moments live at the requested offsets.
TEST(AdamW, SlicesMatchScalarReference) {
  auto alloc = CachingAllocator::create();
  std::vector<double> p = {0.5, -0.25, 1.0, 2.0}, g = {0.1, -0.2, 0.3, 0.0};
  optim::OptimizerConfig c;
  c.lr = 0.1;
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.eps = 1e-8;
  c.weight_decay = 0.5;
  // Two segments of one unit: [0, 2) decayed, [2, 4) not.
  optim::AdamW opt(c, {4}, DType::F64, alloc);
  const std::vector<optim::OptSegment> segments = {{0, 0, 2, true}, {0, 2, 2, false}};
  const std::vector<Tensor> params = {Tensor::wrap(p.data(), Shape{4}, DType::F64)};
  const std::vector<Tensor> grads = {Tensor::wrap(g.data(), Shape{4}, DType::F64)};
  std::vector<double> ref = {0.5, -0.25, 1.0, 2.0}, m(4, 0), v(4, 0);
  for (int step = 1; step <= 3; ++step) {
    opt.step(c.lr, 0.5, segments, params, grads);  // grad_scale 0.5 (a clip coefficient)
    for (int i = 0; i < 4; ++i) {
      const double gi = g[size_t(i)] * 0.5;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.99 * v[i] + 0.01 * gi * gi;
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.99, step));
      ref[i] -= c.lr * (mh / (std::sqrt(vh) + c.eps) + (i < 2 ? 0.5 : 0.0) * ref[i]);
    }
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(p[size_t(i)], ref[size_t(i)], 1e-12) << "step " << step << " i " << i;
  }
  EXPECT_EQ(opt.steps_taken(), 3);
  EXPECT_NEAR(opt.m(0).data<double>()[2], m[2], 1e-15);
  EXPECT_NEAR(opt.v(0).data<double>()[1], v[1], 1e-15);
}

TEST(Clipping, CoefficientOnlyAboveThreshold) {
  EXPECT_DOUBLE_EQ(optim::clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_NEAR(optim::clip_coefficient(5.0, 1.0), 0.2, 1e-6);
  EXPECT_DOUBLE_EQ(optim::clip_coefficient(5.0, 0.0), 1.0);  // clipping off
  EXPECT_DOUBLE_EQ(optim::clip_coefficient(NAN, 1.0), 1.0);  // the skip decides, not the clip
}
