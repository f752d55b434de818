// Covers src/meshtrain/checkpoint/consistency.cc (metadata against the tensor set, no shared bytes).
// What export, import and open refuse: writing into a checkpoint, replacing
// files without --force, leaving temporary files behind, following a
// `latest` out of its root or echoing its contents, metadata or byte ranges
// that disagree with the tensor set, a manifest edited after its commit, a
// step directory named for another step or linked in from elsewhere, and
// importing into a step directory or non-finite weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/export_import.h"
#include "meshtrain/checkpoint/fs_util.h"
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
    for (const auto& p : model::build_model_spec(cfg).params) values_.emplace_back(size_t(p.shape.numel()), 0.5f);
    step_dir_ = save(root(), 3);
  }
  // values_ as the parameters of tiny_llama, saved at `step` under `root`.
  std::string save(const std::string& root, int64_t step) const {
    model::ModelConfig cfg = testing::tiny_llama();
    cfg.finalize();
    const model::ModelSpec spec = model::build_model_spec(cfg);
    SaveRequest req;
    req.step = step;
    req.metadata = {{"step", step}, {kMetaModelConfig, model_config_to_json(cfg)}};
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const auto& p = spec.params[i];
      req.pieces.push_back({p.name, p.shape, DType::F32, full_box(p.shape), values_[i].data()});
    }
    return save_checkpoint_single(root, req);
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

// The manifest carries its own digest: an edit of anything in it (the
// optimizer clock, the data position, two pieces' offsets swapped) is
// refused before it is believed; a checkpoint from before digests opens.
TEST_F(Guards, AnEditedManifestIsRefusedByItsDigest) {
  const fs::path manifest = fs::path(step_dir_) / kManifestFile;
  const std::string original = testing::read_file_text(manifest);
  auto edit_only_the_manifest = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(original);
    f(j);
    std::ofstream(manifest, std::ios::trunc) << j.dump(1);
  };
  edit_only_the_manifest([](nlohmann::json& j) { j["metadata"]["optimizer"] = {{"steps_taken", 1000}}; });
  expect_error([&] { CheckpointReader::open(root()); }, "does not match its digest in manifest.json.sha256");
  edit_only_the_manifest([](nlohmann::json& j) {
    auto& a = j["tensors"][1]["pieces"][0];
    auto& b = j["tensors"][2]["pieces"][0];
    std::swap(a["byte_offset"], b["byte_offset"]);
    std::swap(a["sha256"], b["sha256"]);
  });
  expect_error([&] { CheckpointReader::open(root()); }, "does not match its digest");
  std::ofstream(manifest, std::ios::trunc) << original;
  EXPECT_EQ(CheckpointReader::open(root()).step(), 3);
  fs::remove(fs::path(step_dir_) / kManifestDigestFile);  // written before digests
  EXPECT_EQ(CheckpointReader::open(root()).step(), 3);
}

// A step directory holds the step its name says, and is the root's own.
TEST_F(Guards, AStepDirectoryMustBeNamedForItsStepAndNotBeALink) {
  const fs::path renamed = fs::path(root()) / "step-00000009";
  fs::rename(step_dir_, renamed);
  std::ofstream(fs::path(root()) / "latest", std::ios::trunc) << "step-00000009\n";
  expect_error([&] { CheckpointReader::open(root()); }, "named for step 9 but its manifest holds step 3");
  expect_error([&] { CheckpointReader::open(renamed.string()); }, "named for step 9");
  // The same directory outside the root, linked in under its own name.
  const fs::path outside = dir_.path() / "elsewhere" / "step-00000003";
  fs::create_directories(outside.parent_path());
  fs::rename(renamed, outside);
  fs::create_directory_symlink(outside, step_dir_);
  std::ofstream(fs::path(root()) / "latest", std::ios::trunc) << "step-00000003\n";
  expect_error([&] { CheckpointReader::open(root()); }, "is a symbolic link");
  EXPECT_TRUE(list_complete_checkpoints(root()).empty()) << "a link is listed as one of the root's checkpoints";
  EXPECT_EQ(CheckpointReader::open(outside.string()).step(), 3) << "named directly, the directory itself opens";
}

// Import writes a root of its own: never into a committed step directory.
TEST_F(Guards, ImportNeverWritesIntoAStepDirectory) {
  const auto r = CheckpointReader::open(root());
  const std::string file = dir_.str() + "/export/model.safetensors";
  export_safetensors(r, file);
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(step_dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto before = listing();
  for (bool force : {false, true})
    expect_error([&] { import_safetensors(file, step_dir_, force); }, "is or lies inside a checkpoint directory");
  expect_error([&] { import_safetensors(file, step_dir_ + "/sub", true); }, "inside a checkpoint directory");
  EXPECT_EQ(listing(), before);
  EXPECT_EQ(CheckpointReader::open(root()).step(), 3);
}

// NaN or infinite weights make every loss NaN: refused unless asked for.
TEST_F(Guards, ImportRefusesNonFiniteWeightsUnlessAllowed) {
  const std::string file = dir_.str() + "/export/model.safetensors";
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    values_[1][3] = bad;
    const std::string src = dir_.str() + "/bad";
    fs::remove_all(src);
    save(src, 4);
    export_safetensors(CheckpointReader::open(src), file, DType::F32, {}, true);
    const std::string out = dir_.str() + "/imported";
    fs::remove_all(out);
    expect_error([&] { import_safetensors(file, out); }, "NaN or infinite weight(s) (first in '");
    EXPECT_FALSE(fs::exists(out)) << "nothing is written";
    EXPECT_EQ(CheckpointReader::open(import_safetensors(file, out, false, /*allow_nonfinite=*/true)).step(), 0);
  }
}

}  // namespace
}  // namespace meshtrain::checkpoint
