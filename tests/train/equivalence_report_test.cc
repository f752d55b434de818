// Covers src/meshtrain/train/equivalence_report.cc: compare_records on
// records made by hand. Equal records pass; an error of 1e-3 in a tensor of
// small values fails and is named, though the whole vector's largest value
// would hide it under 1e-6; the report's lines say so.
#include <gtest/gtest.h>

#include <vector>

#include "meshtrain/train/equivalence.h"

namespace meshtrain::train {
namespace {

// Two tensors: "big" (values near 1) and "small" (values near 1e-3).
std::vector<GlobalTensor> tensors() { return {{"big", 0, 4}, {"small", 4, 8}}; }

StepRecord record(double small_scale) {
  StepRecord r;
  r.metrics.loss = 2.5;
  r.metrics.supervised = 100;
  r.params = {1.0, -0.5, 0.75, 0.25, 1e-3, -2e-3, 1.5e-3, 5e-4};
  r.grads = {0.1, 0.2, -0.3, 0.4, 1e-3, 2e-3, -1e-3, 3e-3};
  r.update = {-1e-4, 2e-4, 1e-4, -3e-4, 1e-5, -2e-5, 1e-5, 1e-5};
  for (size_t i = 4; i < 8; ++i) r.params[i] *= small_scale;
  return r;
}

TEST(EquivalenceReport, EqualRecordsPass) {
  const std::vector<StepRecord> a = {record(1.0), record(1.0)};
  const EquivalenceReport r = compare_records(a, a, tensors(), "fp32", 1e-5);
  EXPECT_TRUE(r.pass()) << r.str();
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].param.rel, 0.0);
  EXPECT_NE(r.str().find("PASS"), std::string::npos);
}

TEST(EquivalenceReport, AnErrorInASmallTensorIsFoundAndNamed) {
  const std::vector<StepRecord> ref = {record(1.0)}, got = {record(1.0 + 1e-3)};
  const EquivalenceReport r = compare_records(ref, got, tensors(), "fp32", 1e-5);
  EXPECT_FALSE(r.pass());
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].param.tensor, "small");
  EXPECT_NEAR(r.steps[0].param.rel, 1e-3, 1e-9);
  EXPECT_EQ(r.steps[0].grad.rel, 0.0);
  const std::string text = r.str();
  EXPECT_NE(text.find("FAIL"), std::string::npos) << text;
  EXPECT_NE(text.find("small"), std::string::npos) << text;
}

TEST(EquivalenceReport, DifferentCountsFailWhateverTheValues) {
  std::vector<StepRecord> ref = {record(1.0)}, got = ref;
  got[0].metrics.supervised = 99;
  EXPECT_FALSE(compare_records(ref, got, tensors(), "fp32", 1e-5).pass());
}

}  // namespace
}  // namespace meshtrain::train
