// Covers src/meshtrain/checkpoint/consistency.cc (metadata against the tensor set, no shared bytes).
// What export, import and open refuse: writing into a checkpoint, replacing
// files without --force, leaving temporary files behind, following a
// `latest` out of its root or echoing its contents, and metadata or byte
// ranges that disagree with the tensor set.
#include <gtest/gtest.h>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/export_import.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/model/param_spec.h"
#include "model/model_fixtures.h"

namespace meshtrain::checkpoint {
namespace {

using testing::ScratchDir;
namespace fs = std::filesystem;

template <typename F>
void expect_error(F&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A training-style checkpoint of tiny_llama's parameters (zeros) at step 3.
class Guards : public ::testing::Test {
 protected:
  void SetUp() override {
    model::ModelConfig cfg = testing::tiny_llama();
    cfg.finalize();
    const model::ModelSpec spec = model::build_model_spec(cfg);
    SaveRequest req;
    req.step = 3;
    req.metadata = {{"step", 3}, {kMetaModelConfig, model_config_to_json(cfg)}};
    for (const auto& p : spec.params) {
      values_.emplace_back(size_t(p.shape.numel()), 0.5f);
      req.pieces.push_back({p.name, p.shape, DType::F32, full_box(p.shape), values_.back().data()});
    }
    step_dir_ = save_checkpoint_single(root(), req);
  }
  std::string root() const { return (dir_.path() / "ckpt").string(); }
  ScratchDir dir_;
  std::string step_dir_;
  std::vector<std::vector<float>> values_;
};

TEST_F(Guards, ExportRefusesACheckpointAsItsOutput) {
  const auto r = CheckpointReader::open(root());
  expect_error([&] { export_safetensors(r, step_dir_ + "/rank-00000.bin", DType::F32, {}, true); }, "inside a checkpoint");
  expect_error([&] { export_safetensors(r, root() + "/model.safetensors", DType::F32, {}, true); }, "inside a checkpoint");
  // Nothing was touched: the checkpoint still verifies.
  EXPECT_EQ(CheckpointReader::open(root()).step(), 3);
}

TEST_F(Guards, ExportReplacesFilesOnlyWithForce) {
  const auto r = CheckpointReader::open(root());
  const std::string out = dir_.str() + "/export/model.safetensors";
  export_safetensors(r, out);
  expect_error([&] { export_safetensors(r, out); }, "already exists; pass --force");
  const std::string other = dir_.str() + "/export/other.safetensors";
  expect_error([&] { export_safetensors(r, other); }, "config.json already exists");
  EXPECT_NO_THROW(export_safetensors(r, out, DType::F32, {}, true));
}

TEST_F(Guards, AFailedExportLeavesNoTemporaryFile) {
  const auto r = CheckpointReader::open(root());
  const fs::path out = dir_.path() / "export" / "model.safetensors";
  fault::arm(fault::parse_rule("export.write#3"));
  EXPECT_THROW(export_safetensors(r, out.string()), fault::InjectedFault);
  fault::disarm();
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    ADD_FAILURE() << "left behind: " << e.path();
}

TEST_F(Guards, ImportIntoARootWithCheckpointsNeedsForce) {
  const auto r = CheckpointReader::open(root());
  const std::string file = dir_.str() + "/export/model.safetensors";
  export_safetensors(r, file);
  expect_error([&] { import_safetensors(file, root()); }, "already holds checkpoints");
  EXPECT_EQ(CheckpointReader::open(root()).step(), 3) << "latest did not move";
  EXPECT_EQ(CheckpointReader::open(import_safetensors(file, dir_.str() + "/fresh")).step(), 0);
  EXPECT_EQ(CheckpointReader::open(import_safetensors(file, root(), true)).step(), 0);
}

TEST_F(Guards, LatestIsNotFollowedOutOfTheRootNorEchoed) {
  const fs::path latest = fs::path(root()) / "latest";
  const fs::path secret = dir_.path() / "secret.txt";
  std::ofstream(secret) << "root:x:0:0:SECRET\n";
  fs::remove(latest);
  fs::create_symlink(secret, latest);
  try {
    CheckpointReader::open(root());
    ADD_FAILURE() << "a symlink out of the root was followed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("leading outside"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("SECRET"), std::string::npos) << e.what();
  }
  fs::remove(latest);
  std::ofstream(latest) << "\x1b[2J\x07junk SECRET";
  try {
    CheckpointReader::open(root());
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a step-NNNNNNNN directory name"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("SECRET"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos) << "terminal escape echoed";
  }
}

TEST_F(Guards, MetadataMustAgreeWithTheTensors) {
  auto edit_meta = [&](const std::function<void(nlohmann::json&)>& f) {
    testing::tamper_manifest(step_dir_, [&](nlohmann::json& j) { f(j["metadata"]); });
  };
  edit_meta([](nlohmann::json& m) { m["step"] = 1000000; });
  expect_error([&] { CheckpointReader::open(root()); }, "metadata.step = 1000000 but the manifest's step is 3");
  edit_meta([](nlohmann::json& m) { m["step"] = 3; m[kMetaModelConfig]["n_layers"] = 1; });
  expect_error([&] { CheckpointReader::open(root()); }, "tensor 'model.layers.1.");
  edit_meta([](nlohmann::json& m) { m[kMetaModelConfig]["n_layers"] = 3; });
  expect_error([&] { CheckpointReader::open(root()); }, "has parameter 'model.layers.2.");
  edit_meta([](nlohmann::json& m) { m[kMetaModelConfig]["n_layers"] = 2; });
  EXPECT_EQ(CheckpointReader::open(root()).step(), 3);
}

TEST_F(Guards, TwoTensorsMayNotShareBytes) {
  // Point the last tensor's piece at the first tensor's bytes (same length).
  testing::tamper_manifest(step_dir_, [](nlohmann::json& j) {
    auto& tensors = j["tensors"];
    for (auto& t : tensors)
      if (t["pieces"][0]["byte_length"] == tensors[0]["pieces"][0]["byte_length"] && t != tensors[0]) {
        t["pieces"][0]["byte_offset"] = tensors[0]["pieces"][0]["byte_offset"];
        t["pieces"][0]["sha256"] = tensors[0]["pieces"][0]["sha256"];
        return;
      }
    FAIL() << "no tensor of the first tensor's size";
  });
  expect_error([&] { CheckpointReader::open(root()); }, "share bytes");
}

}  // namespace
}  // namespace meshtrain::checkpoint
