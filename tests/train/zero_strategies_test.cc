// Covers src/meshtrain/parallel/param_residency.cc and grad_reduction.cc,
// the two strategies a ZeRO stage is made of (docs/math.md (M.26)): what a
// rank keeps at rest between steps, measured by its tracker at dp = 2.
// Stage 0 keeps whole parameters, gradients and moments; stage 1 the
// moments of its owned half (gradients reduced in the flat buffer); stage 2
// also only its half of the gradients (scattered); stage 3 also only its
// half of the parameters (sharded, gathered per unit). The reproducible
// tree wraps either reduction and adds one whole gradient buffer, the
// micro-batch leaf it sums in its fixed order (docs/math.md (M.10)).
#include <gtest/gtest.h>

#include <mutex>

#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

struct AtRest {
  double params = 0, grads = 0, optimizer = 0;
};

AtRest at_rest(int stage, bool reproducible) {
  auto cfg = tiny_train_config();
  cfg.parallel.dp = 2;
  cfg.parallel.zero_stage = stage;
  cfg.training.reproducible = reproducible;
  cfg.validate();
  AtRest out;
  std::mutex mu;
  with_trainers(cfg, varied_documents(64, 5), std::nullopt, [&](train::Trainer& t) {
    t.step();
    const MemorySnapshot s = t.context().allocator->tracker().snapshot();
    std::lock_guard<std::mutex> lock(mu);
    if (t.context().rank == 0)
      out = {double(s.current[size_t(MemCategory::Params)]), double(s.current[size_t(MemCategory::Grads)]),
             double(s.current[size_t(MemCategory::Optimizer)])};
  });
  return out;
}

// About half: a shard of 2 is the padded half of each unit.
void expect_half(double part, double whole, const char* what) {
  EXPECT_GT(part, 0.45 * whole) << what;
  EXPECT_LT(part, 0.6 * whole) << what;
}

TEST(ZeroStrategies, EachStageKeepsItsShareAtRest) {
  const AtRest s0 = at_rest(0, false), s1 = at_rest(1, false), s2 = at_rest(2, false), s3 = at_rest(3, false);
  ASSERT_GT(s0.params, 0);
  EXPECT_EQ(s0.grads, s0.params);
  EXPECT_EQ(s0.optimizer, 2 * s0.params);
  EXPECT_EQ(s1.params, s0.params);
  EXPECT_EQ(s1.grads, s0.grads) << "stage 1 reduces in the whole flat buffer";
  expect_half(s1.optimizer, s0.optimizer, "stage 1 moments");
  EXPECT_EQ(s2.params, s0.params);
  expect_half(s2.grads, s0.grads, "stage 2 gradients");
  EXPECT_EQ(s2.optimizer, s1.optimizer);
  expect_half(s3.params, s0.params, "stage 3 parameters");
  EXPECT_EQ(s3.grads, s2.grads);
  EXPECT_EQ(s3.optimizer, s1.optimizer);
}

TEST(ZeroStrategies, TheTreeWrapsEachReductionWithOneLeafBuffer) {
  const double whole = at_rest(0, false).params;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(stage);
    const AtRest plain = at_rest(stage, false), tree = at_rest(stage, true);
    EXPECT_EQ(tree.params, plain.params);
    EXPECT_EQ(tree.optimizer, plain.optimizer);
    EXPECT_EQ(tree.grads, plain.grads + whole);
  }
}

}  // namespace
