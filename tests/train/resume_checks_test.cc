// What a resume refuses and what it claims (resume_checks.h): a config that
// differs from the checkpoint's, a tensor missing from the manifest, a run
// directory without `latest`; and what allowed changes, changes of
// precision, reproducible mode or training text, and weights-only resumes
// report.
#include "meshtrain/train/resume_checks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/sha256.h"
#include "train_fixtures.h"
#include "support/test_dir.h"

using namespace meshtrain;
namespace fs = std::filesystem;
using meshtrain::testing::tiny_train_config;
using meshtrain::testing::varied_documents;
using meshtrain::testing::with_trainers;

namespace {

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = meshtrain::testing::fresh_test_dir("mt_resume_");
    cfg_ = tiny_train_config();
    cfg_.model.n_layers = 4;
    cfg_.metrics.run_dir = dir_.string();
    cfg_.parallel.dp = 2;
    // Steps 2 and 4 are saved; latest names step 4.
    with_trainers(cfg_, ds_, std::nullopt, [](train::Trainer& t) {
      for (int s = 1; s <= 4; ++s) {
        t.step();
        if (s % 2 == 0) t.save_checkpoint();
      }
    });
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path ckpt() const { return dir_ / "checkpoints"; }

  // The line resume_or_init prints, or the error it throws.
  std::string resume(const train::TrainConfig& cfg, int64_t* step = nullptr) {
    std::string out;
    try {
      with_trainers(cfg, ds_, std::nullopt, [&](train::Trainer& t) {
        const std::string line = t.resume_or_init();
        if (t.context().rank == 0) {
          out = line;
          if (step) *step = t.steps_done();
        }
      });
    } catch (const std::exception& e) {
      return std::string("error: ") + e.what();
    }
    return out;
  }

  fs::path dir_;
  train::TrainConfig cfg_;
  data::TokenDataset ds_ = varied_documents(64, 3);
};

TEST_F(Resume, TheSameConfigReplaysBitwise) {
  EXPECT_NE(resume(cfg_).find("bitwise replay"), std::string::npos);
}

TEST_F(Resume, ADifferentModelOrObjectiveIsRefusedNamingEachKey) {
  auto c = cfg_;
  c.model.n_layers = 2;
  c.model.finalize();
  std::string r = resume(c);
  EXPECT_NE(r.find("model.n_layers 4 -> 2"), std::string::npos) << r;
  c = cfg_;
  c.model.tied_embeddings = true;
  EXPECT_NE(resume(c).find("model.tied_embeddings false -> true"), std::string::npos);
  c = cfg_;
  c.model.norm_eps = 1e-6;
  c.model.rope_theta = 500000;
  c.optimizer.lr = 5e-3;
  r = resume(c);
  for (const char* key : {"model.norm_eps", "model.rope_theta 10000.0 -> 500000.0", "optimizer.lr 0.01 -> 0.005"})
    EXPECT_NE(r.find(key), std::string::npos) << key << " in: " << r;
  EXPECT_EQ(r.find("bitwise"), std::string::npos) << r;
}

TEST_F(Resume, AnAllowedChangeIsSaidAndNotCalledBitwise) {
  auto c = cfg_;
  c.optimizer.lr = 5e-3;
  c.checkpoint.allow_changes = {"optimizer.lr"};
  const std::string r = resume(c);
  EXPECT_NE(r.find("changes (optimizer.lr 0.01 -> 0.005)"), std::string::npos) << r;
  EXPECT_NE(r.find("the continuation differs from the original run"), std::string::npos) << r;
  EXPECT_EQ(r.rfind("bitwise replay", 0), std::string::npos) << r;
}

// What a resume accepts but cannot replay: another precision policy,
// reproducible mode switched, other training text. Each is named, and the
// claim is never "bitwise replay".
TEST_F(Resume, PrecisionAndReproducibleModeChangesAreNamed) {
  auto c = cfg_;
  c.training.precision = "bf16";
  std::string r = resume(c);
  EXPECT_NE(r.find("training.precision \"fp32\" -> \"bf16\""), std::string::npos) << r;
  EXPECT_EQ(r.find("| bitwise replay"), std::string::npos) << r;
  c = cfg_;
  c.training.reproducible = true;
  r = resume(c);
  EXPECT_NE(r.find("training.reproducible false -> true"), std::string::npos) << r;
  EXPECT_EQ(r.find("| bitwise replay"), std::string::npos) << r;
}

TEST(ResumeChanges, OtherTrainingTextIsNamedByItsDigest) {
  auto cfg = tiny_train_config();
  cfg.data.path = "runs/data";
  const nlohmann::json meta = {{"data", {{"path", "runs/data"}, {"train_sha256", std::string(64, 'a')}}},
                               {"precision", {{"policy", "fp32"}, {"grad_reduce_dtype", "fp32"}}},
                               {"layout", {{"reproducible", false}}}};
  EXPECT_TRUE(train::continuation_changes(meta, cfg, std::string(64, 'a')).empty());
  const auto changes = train::continuation_changes(meta, cfg, std::string(64, 'b'));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes[0].find("training data: data.path = 'runs/data' holds other text (train.bin SHA-256 aaaaaaaaaaaa"),
            std::string::npos)
      << changes[0];
  // A checkpoint that recorded no digest (older, or data in memory) is not compared on it.
  EXPECT_TRUE(train::continuation_changes({{"data", {{"path", "x"}}}}, cfg, std::string(64, 'b')).empty());
}

TEST_F(Resume, AMissingMomentIsNamedUnlessWeightsOnlyIsAsked) {
  const fs::path step = ckpt() / "step-00000004";
  nlohmann::json m = nlohmann::json::parse(std::ifstream(step / "manifest.json"));
  auto& tensors = m["tensors"];
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i]["name"] == "optimizer.exp_avg.lm_head.weight") tensors.erase(i);
  // Written as if saved that way: its digest follows.
  std::ofstream(step / "manifest.json", std::ios::trunc) << m.dump();
  std::ofstream(step / "manifest.json.sha256", std::ios::trunc) << checkpoint::manifest_digest_line(m.dump());
  std::string r = resume(cfg_);
  EXPECT_NE(r.find("lacks 'optimizer.exp_avg.lm_head.weight'"), std::string::npos) << r;
  auto c = cfg_;
  c.checkpoint.weights_only = true;
  int64_t at = -1;
  r = resume(c, &at);
  EXPECT_NE(r.find("weights only, the optimizer state starts fresh"), std::string::npos) << r;
  EXPECT_EQ(at, 4) << "the step and data position continue";
}

TEST_F(Resume, WithoutLatestTheHighestVerifiedStepIsUsedAndSaid) {
  fs::remove(ckpt() / "latest");
  int64_t at = -1;
  std::string r = resume(cfg_, &at);
  EXPECT_NE(r.find("no 'latest' pointer"), std::string::npos) << r;
  EXPECT_NE(r.find("step-00000004"), std::string::npos) << r;
  EXPECT_EQ(at, 4);
  // Step 4 damaged: step 2 is used, and the skip is named.
  std::fstream f(ckpt() / "step-00000004" / "rank-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(3);
  f.put('\x5a');
  f.close();
  r = resume(cfg_, &at);
  EXPECT_EQ(at, 2) << r;
  EXPECT_NE(r.find("skipped: step-00000004"), std::string::npos) << r;
}

TEST_F(Resume, NeverAFreshStartOverAnotherRunsSteps) {
  auto c = cfg_;
  c.checkpoint.resume = false;
  EXPECT_NE(resume(c).find("already holds checkpoints"), std::string::npos);
  // Nothing verifies and no pointer: refused, the directories stay.
  fs::remove(ckpt() / "latest");
  for (const auto& [s, d] : checkpoint::list_complete_checkpoints(ckpt())) fs::resize_file(d / "rank-00001.bin", 3);
  EXPECT_NE(resume(cfg_).find("none verifies"), std::string::npos);
  EXPECT_EQ(checkpoint::list_complete_checkpoints(ckpt()).size(), 2u);
}

}  // namespace
