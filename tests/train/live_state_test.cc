// The checkpoint made from the live ranks' state (train/live_state.h): what
// every rank holds of its last step, one copy of each piece kept, equals
// the checkpoint the ranks would have saved together; a state a lost rank
// held alone (a ZeRO-3 shard) is refused, naming the gap. The data position
// is the last step's even when the failed step had read its window.
#include <gtest/gtest.h>

#include <filesystem>

#include "meshtrain/checkpoint/compare.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/train/live_state.h"
#include "support/test_dir.h"
#include "train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::train;
namespace fs = std::filesystem;

namespace {

TrainConfig live_config(const fs::path& run_dir, int zero_stage) {
  TrainConfig c = meshtrain::testing::tiny_train_config();
  c.parallel.dp = 2;
  c.parallel.zero_stage = zero_stage;
  c.metrics.run_dir = run_dir.string();
  c.checkpoint.keep_last = 3;
  return c;
}

// Two steps on dp=2, then `after` on every rank.
void two_steps(const TrainConfig& cfg, const std::function<void(Trainer&)>& after) {
  const auto ds = meshtrain::testing::varied_documents(40, 3);
  meshtrain::testing::with_trainers(cfg, ds, std::nullopt, [&](Trainer& t) {
    t.step();
    t.step();
    after(t);
  });
}

std::string root_of(const TrainConfig& cfg) { return cfg.checkpoint.resolved_dir(cfg.metrics.run_dir); }

TEST(LiveState, EveryRanksStateMakesTheCheckpointTheRanksWouldHaveSaved) {
  const fs::path dir = meshtrain::testing::fresh_test_dir("live");
  const TrainConfig live = live_config(dir / "live", 0), saved = live_config(dir / "saved", 0);
  two_steps(live, [](Trainer& t) {
    // The third step fails after its window was read: the loader has moved on.
    const int64_t local = t.config().training.micro_batch;  // G = 1
    data::Batch window;
    t.loader().next_window(2 * local, t.context().rank * local, local, &window);
    write_live_state(t, t.context().rank);
  });
  two_steps(saved, [](Trainer& t) { t.save_checkpoint(); });

  const LiveStateCommit c = commit_live_state(root_of(live), live.checkpoint.keep_last);
  ASSERT_FALSE(c.committed.empty()) << c.why_not;
  EXPECT_EQ(c.step, 2);
  EXPECT_EQ(c.ranks, 2);
  const auto a = checkpoint::CheckpointReader::open(c.committed);
  const auto b = checkpoint::CheckpointReader::open((fs::path(root_of(saved)) / "step-00000002").string());
  const checkpoint::CheckpointDiff d = checkpoint::compare_checkpoints(a, b);
  EXPECT_TRUE(d.identical()) << d.str();
  EXPECT_GT(d.tensors_compared, 0);
  for (const auto& e : fs::directory_iterator(root_of(live)))
    EXPECT_NE(e.path().filename().string().rfind(".live", 0), 0u) << e.path() << " left behind";
}

TEST(LiveState, OneRanksZero3ShardsAreNotTheWholeState) {
  const fs::path dir = meshtrain::testing::fresh_test_dir("live");
  const TrainConfig cfg = live_config(dir / "zero3", 3);
  // Rank 1 is the one that died: only rank 0 writes.
  two_steps(cfg, [](Trainer& t) {
    if (t.context().rank == 0) write_live_state(t, 0);
  });
  const LiveStateCommit c = commit_live_state(root_of(cfg), cfg.checkpoint.keep_last);
  EXPECT_TRUE(c.committed.empty());
  EXPECT_NE(c.why_not.find("gap in coverage"), std::string::npos) << c.why_not;
  EXPECT_FALSE(fs::exists(fs::path(root_of(cfg)) / "step-00000002"));
  EXPECT_TRUE(checkpoint::list_complete_checkpoints(root_of(cfg)).empty());
}

TEST(LiveState, AStepAlreadyCheckpointedIsNotWrittenAgain) {
  const fs::path dir = meshtrain::testing::fresh_test_dir("live");
  const TrainConfig cfg = live_config(dir / "both", 0);
  two_steps(cfg, [](Trainer& t) {
    t.save_checkpoint();
    write_live_state(t, t.context().rank);
  });
  const LiveStateCommit c = commit_live_state(root_of(cfg), cfg.checkpoint.keep_last);
  EXPECT_TRUE(c.committed.empty());
  EXPECT_TRUE(c.why_not.empty()) << c.why_not;
  EXPECT_EQ(checkpoint::list_complete_checkpoints(root_of(cfg)).size(), 1u);
}

}  // namespace
