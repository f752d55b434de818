// Covers src/meshtrain/train/option_effects.cc.
// A setting that would change nothing is refused where a user states it
// (a config with its --set overrides, a --layout), naming the key, why it
// has no effect and what would give it one (docs/errors.md: never a silent
// fallback). The same settings where they act are accepted.
#include "meshtrain/train/option_effects.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/train_config.h"
#include "train/config_error.h"

using namespace meshtrain;

namespace {

std::string rejection(const std::vector<std::string>& overrides) {
  return meshtrain::testing::config_error("[data]\npath = \"runs/data\"\n", overrides);
}

std::string layout_rejection(const std::string& layout) {
  try {
    train::parse_layout(layout);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(OptionEffects, LossScalingOutsideFp16IsRefused) {
  std::string e = rejection({"training.loss_scale=1024"});
  EXPECT_NE(e.find("training.loss_scale has no effect under training.precision = \"fp32\""), std::string::npos) << e;
  e = rejection({"training.precision=\"bf16\"", "training.loss_scale_window=10"});
  EXPECT_NE(e.find("training.loss_scale_window has no effect under training.precision = \"bf16\""), std::string::npos)
      << e;
  EXPECT_EQ(rejection({"training.precision=\"fp16\"", "training.loss_scale=1024", "training.loss_scale_window=10"}),
            "");
}

TEST(OptionEffects, ZeroThreeOptionsUnderAnotherStageAreRefused) {
  std::string e = rejection({"parallel.dp=2", "parallel.zero_stage=2", "parallel.reshard_after_forward=false"});
  EXPECT_NE(e.find("parallel.reshard_after_forward = false (layout reshard=0) has no effect under "
                   "parallel.zero_stage = 2"),
            std::string::npos)
      << e;
  e = rejection({"parallel.dp=2", "parallel.zero_stage=1", "parallel.keep_gathered=true"});
  EXPECT_NE(e.find("parallel.keep_gathered = true (layout keep=1) has no effect under parallel.zero_stage = 1"),
            std::string::npos)
      << e;
  EXPECT_EQ(rejection({"parallel.dp=2", "parallel.zero_stage=3", "parallel.reshard_after_forward=false",
                       "parallel.keep_gathered=true"}),
            "");
  EXPECT_NE(layout_rejection("dp=2,zero=2,reshard=0").find("has no effect under parallel.zero_stage = 2"),
            std::string::npos);
  EXPECT_NE(layout_rejection("dp=2,zero=1,keep=1").find("keep_gathered"), std::string::npos);
  EXPECT_EQ(layout_rejection("dp=2,zero=3,reshard=0,keep=1"), "");
}

TEST(OptionEffects, SequenceParallelismWithoutTensorParallelismIsRefused) {
  std::string e = rejection({"parallel.sequence_parallel=true"});
  EXPECT_NE(e.find("parallel.sequence_parallel = true (layout sp=on) has no effect with parallel.tp = 1"),
            std::string::npos)
      << e;
  EXPECT_EQ(rejection({"parallel.sequence_parallel=true", "parallel.tp=2"}), "");
  EXPECT_NE(layout_rejection("dp=2,sp=on").find("has no effect with parallel.tp = 1"), std::string::npos);
  EXPECT_EQ(layout_rejection("tp=2,sp=on"), "");
}
