// Trainer checkpoints (train/trainer_checkpoint.cc): exact resume and resharding across data-parallel
// layouts (docs/math.md, "Rule: restore claims").
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "meshtrain/checkpoint/compare.h"
#include "meshtrain/checkpoint/reader.h"
#include "support/numeric.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

namespace {

train::TrainConfig config_for(int R, int stage, const fs::path& dir) {
  auto cfg = tiny_train_config();
  cfg.optimizer.lr = 1e-3;
  cfg.data.mode = "packed";
  cfg.parallel.dp = R;
  cfg.parallel.zero_stage = stage;
  cfg.training.micro_batch = 4 / R;  // global window of 4 rows for every R
  cfg.training.steps = 4;
  cfg.checkpoint.dir = dir.string();
  cfg.checkpoint.keep_last = 10;
  return cfg;
}

nlohmann::json loader_state_of(const fs::path& root) {
  return checkpoint::CheckpointReader::open(root.string()).metadata().at("loader_state");
}

}  // namespace

TEST(TrainerCheckpoint, ExactResumeIsBitwise) {
  const auto ds = varied_documents(64, 3);
  for (int stage : {0, 3}) {
    const fs::path a = fresh_dir("a" + std::to_string(stage)), b = fresh_dir("b" + std::to_string(stage));
    // Uninterrupted: 4 steps, save.
    with_trainers(config_for(2, stage, a), ds, std::nullopt, [&](train::Trainer& t) {
      for (int s = 0; s < 4; ++s) t.step();
      t.save_checkpoint();
    });
    // Interrupted: 2 steps, save; new trainers resume and run 2 more.
    with_trainers(config_for(2, stage, b), ds, std::nullopt, [&](train::Trainer& t) {
      for (int s = 0; s < 2; ++s) t.step();
      t.save_checkpoint();
    });
    with_trainers(config_for(2, stage, b), ds, std::nullopt, [&](train::Trainer& t) {
      const std::string line = t.resume_or_init();
      EXPECT_NE(line.find("bitwise replay"), std::string::npos) << line;
      EXPECT_EQ(t.steps_done(), 2);
      for (int s = 0; s < 2; ++s) t.step();
      t.save_checkpoint();
    });
    EXPECT_EQ(tensors_of(a), tensors_of(b)) << "parameters and Adam moments after 2+2 steps";
    EXPECT_EQ(loader_state_of(a), loader_state_of(b)) << "data cursor";
    const auto diff = checkpoint::compare_checkpoints(checkpoint::CheckpointReader::open(a.string()),
                                                      checkpoint::CheckpointReader::open(b.string()));
    EXPECT_TRUE(diff.identical()) << diff.str();
    EXPECT_GT(diff.tensors_compared, 0);
    // The comparison sees a difference: one more step on B.
    with_trainers(config_for(2, stage, b), ds, std::nullopt, [&](train::Trainer& t) {
      t.resume_or_init();
      t.step();
      t.save_checkpoint();
    });
    const auto moved = checkpoint::compare_checkpoints(checkpoint::CheckpointReader::open(a.string()),
                                                       checkpoint::CheckpointReader::open(b.string()));
    EXPECT_FALSE(moved.identical());
    EXPECT_FALSE(moved.position_equal);
    EXPECT_FALSE(moved.differing.empty());
  }
}

// Save under dp in {1, 2, 4} x ZeRO {0..3}, load into every other layout:
// parameters and moments bitwise equal; the next step's loss matches the
// uninterrupted run within 1e-5 relative (other reduction order when R changes).
TEST(TrainerCheckpoint, ReshardsAcrossEveryLayout) {
  const auto ds = varied_documents(64, 3);
  struct Saved {
    fs::path dir;
    std::map<std::string, std::vector<float>> tensors;
    double next_loss = 0;
  };
  std::vector<std::pair<std::pair<int, int>, Saved>> saved;
  for (int R : {1, 2, 4})
    for (int stage : {0, 1, 2, 3}) {
      Saved s;
      s.dir = fresh_dir("src" + std::to_string(R) + std::to_string(stage));
      std::mutex mu;
      with_trainers(config_for(R, stage, s.dir), ds, std::nullopt, [&](train::Trainer& t) {
        for (int k = 0; k < 2; ++k) t.step();
        t.save_checkpoint();
        const double loss = t.step().loss;
        std::lock_guard<std::mutex> lock(mu);
        s.next_loss = loss;
      });
      s.tensors = tensors_of(s.dir);
      saved.push_back({{R, stage}, s});
    }
  for (const auto& [from, src] : saved)
    for (int R : {1, 2, 4})
      for (int stage : {0, 1, 2, 3}) {
        SCOPED_TRACE(::testing::Message() << "from dp=" << from.first << " zero=" << from.second << " to dp=" << R
                                          << " zero=" << stage);
        const fs::path out = fresh_dir("dst");
        double next_loss = 0;
        std::mutex mu;
        with_trainers(config_for(R, stage, out), ds, std::nullopt, [&](train::Trainer& t) {
          t.restore(checkpoint::CheckpointReader::open(src.dir.string()));
          t.save_checkpoint();  // what the target layout holds, written back
          const double loss = t.step().loss;
          std::lock_guard<std::mutex> lock(mu);
          next_loss = loss;
        });
        EXPECT_EQ(tensors_of(out), src.tensors);
        EXPECT_NEAR(next_loss, src.next_loss, 1e-5 * src.next_loss);
      }
}

TEST(TrainerCheckpoint, BadCheckpointLeavesTheModelUntouched) {
  const auto ds = varied_documents(32, 3);
  const fs::path dir = fresh_dir("bad");
  auto cfg = config_for(1, 0, dir);
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    t.step();
    t.save_checkpoint();
  });
  // A model of another width cannot load it: rejected before any copy.
  auto other = cfg;
  other.model.d_model = 32;
  with_trainers(other, ds, std::nullopt, [&](train::Trainer& t) {
    const std::vector<double> before = t.engine().gather_unit(1, false);
    EXPECT_THROW(t.restore(checkpoint::CheckpointReader::open(dir.string())), CheckpointError);
    EXPECT_EQ(t.engine().gather_unit(1, false), before);
    EXPECT_EQ(t.steps_done(), 0);
  });
}
