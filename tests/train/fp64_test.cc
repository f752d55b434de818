// training.precision = "fp64": f64 everywhere (the policy the equivalence
// checks use to compare layouts at 1e-10, docs/reproducibility.md). A run
// keeps f64 in its checkpoints and resumes from them bit for bit, and starts
// from HF safetensors weights (f32 in the file) exactly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "meshtrain/checkpoint/hf_format.h"
#include "meshtrain/checkpoint/safetensors.h"
#include "meshtrain/checkpoint/reader.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

TEST(Fp64, PolicyFromTheConfig) {
  const auto p = PrecisionPolicy::from_name("fp64");
  EXPECT_EQ(p, PrecisionPolicy::uniform(DType::F64));
  EXPECT_NO_THROW(p.validate());
  EXPECT_THROW(PrecisionPolicy::from_name("fp64", "bf16"), ConfigError);  // gradients are reduced in f64
  auto cfg = tiny_train_config();
  cfg.training.precision = "fp64";
  EXPECT_NO_THROW(cfg.validate());
}

TEST(Fp64, CheckpointsKeepF64AndResumeBitForBit) {
  const auto ds = varied_documents(96, 3);
  auto cfg = tiny_train_config();
  cfg.training.precision = "fp64";
  cfg.parallel.dp = 2;
  cfg.parallel.zero_stage = 3;
  cfg.checkpoint.dir = fresh_dir("fp64_resume").string();
  const auto straight = params_after(cfg, ds, [](train::Trainer& t) {
    for (int s = 0; s < 4; ++s) t.step();
  });
  params_after(cfg, ds, [](train::Trainer& t) {
    for (int s = 0; s < 2; ++s) t.step();
    t.save_checkpoint();
  });
  const auto reader = checkpoint::CheckpointReader::open(cfg.checkpoint.dir);
  for (const auto& name : reader.names()) EXPECT_EQ(reader.tensor(name).dtype, DType::F64) << name;
  const auto resumed = params_after(cfg, ds, [](train::Trainer& t) {
    t.resume_or_init();
    EXPECT_EQ(t.steps_done(), 2);
    for (int s = 0; s < 2; ++s) t.step();
  });
  EXPECT_EQ(resumed, straight);
}

TEST(Fp64, StartsFromSafetensorsWeightsExactly) {
  auto cfg = tiny_train_config();
  cfg.training.precision = "fp64";
  cfg.parallel.tp = 2;  // each rank fills its slice
  cfg.validate();
  // A Llama-named file of f32 values (every one a different number) with
  // its config.json beside it.
  const auto dir = fresh_dir("fp64_init");
  const std::string path = (dir / "model.safetensors").string();
  std::vector<std::vector<float>> values;
  std::vector<checkpoint::SafetensorsTensor> tensors;
  std::vector<double> want;
  for (const auto& p : model::build_model_spec(cfg.model).params) {
    auto& v = values.emplace_back(size_t(p.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(want.size() + i) / 4096.0f - 1.0f;
    want.insert(want.end(), v.begin(), v.end());
    tensors.push_back({p.name, DType::F32, p.shape, v.data()});
  }
  checkpoint::write_safetensors(path, tensors);
  std::ofstream(dir / "config.json") << checkpoint::hf_config_json(cfg.model).dump();
  cfg.checkpoint.init_from = path;
  const auto loaded = params_after(cfg, varied_documents(16, 1), [](train::Trainer& t) { t.resume_or_init(); });
  EXPECT_EQ(loaded, want);
}
