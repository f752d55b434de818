// Covers src/meshtrain/train/trainer_eval.cc: evaluation reads every
// validation row once whatever the layout (the same targets, the loss
// within rounding of one rank's), changes no parameter, and repeats
// bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

train::EvalResult evaluate_on(const char* layout, bool check_repeat) {
  auto cfg = tiny_train_config();
  if (*layout) cfg = train::with_layout(cfg, train::parse_layout(layout));
  train::EvalResult out;
  std::mutex mu;
  with_trainers(cfg, varied_documents(64, 3), varied_documents(24, 4), [&](train::Trainer& t) {
    const auto before = train::gather_model(t, false);
    const train::EvalResult a = t.evaluate();
    if (check_repeat) {
      const train::EvalResult b = t.evaluate();
      EXPECT_EQ(a.loss_sum, b.loss_sum) << "evaluation repeats bitwise";
      EXPECT_EQ(train::gather_model(t, false), before) << "evaluation changes no parameter";
    }
    std::lock_guard<std::mutex> lock(mu);
    if (t.context().rank == 0) out = a;
  });
  return out;
}

TEST(TrainerEval, EveryLayoutReadsTheSameRows) {
  const train::EvalResult one = evaluate_on("", true);
  ASSERT_GT(one.targets, 0);
  EXPECT_NEAR(one.loss, one.loss_sum / double(one.targets), 1e-12);
  for (const char* layout : {"dp=2", "tp=2", "pp=2", "dp=2,zero=3"}) {
    SCOPED_TRACE(layout);
    const train::EvalResult got = evaluate_on(layout, std::string(layout) == "dp=2,zero=3");
    EXPECT_EQ(got.targets, one.targets);
    EXPECT_EQ(got.target_bytes, one.target_bytes);
    EXPECT_NEAR(got.loss, one.loss, 1e-5 * one.loss);
  }
}

}  // namespace
