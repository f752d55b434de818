// Covers src/meshtrain/train/run_memory.cc: the pre-run memory check of a
// training run is the trainer's own step recorded on the meta device
// (meta_step.h), one per rank class, so the peak it compares with what is
// available (MESHTRAIN_MEMORY_LIMIT here) is the one a real run's
// MemoryTracker reaches, for MoE and context-parallel layouts too.
#include "meshtrain/train/run_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/train/memory_estimate.h"
#include "meshtrain/train/meta_step.h"
#include "meshtrain/train/run.h"
#include "support/test_dir.h"
#include "train_fixtures.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

// MESHTRAIN_MEMORY_LIMIT for the scope: what counts as available memory.
class MemoryLimit {
 public:
  explicit MemoryLimit(int64_t bytes) { ::setenv("MESHTRAIN_MEMORY_LIMIT", std::to_string(bytes).c_str(), 1); }
  ~MemoryLimit() { ::unsetenv("MESHTRAIN_MEMORY_LIMIT"); }
};

int world_of(const train::TrainConfig& cfg) {
  return cfg.parallel.dp * cfg.parallel.cp * cfg.parallel.tp * cfg.parallel.pp;
}

// Every rank's recorded peak, summed: what the ranks of one process hold.
int64_t recorded_need(const train::TrainConfig& cfg) {
  int64_t need = 0;
  for (int rank = 0; rank < world_of(cfg); ++rank) need += train::record_step(cfg, rank).peak.total_peak;
  return need;
}

// Each rank's real peak over two steps (the second one every later step repeats).
std::vector<int64_t> real_peaks(const train::TrainConfig& cfg) {
  std::vector<int64_t> out(size_t(world_of(cfg)));
  meshtrain::testing::with_trainers(cfg, meshtrain::testing::varied_documents(64, 3), std::nullopt,
                                    [&](train::Trainer& t) {
                                      t.step();
                                      t.step();
                                      out[size_t(t.context().rank)] = t.context().allocator->tracker().total_peak();
                                    });
  return out;
}

// Two layers over pp = 2, dp = 2 under ZeRO 1: two rank classes of unequal
// peaks, exact (no overlapped transient gradient, docs/planning.md).
train::TrainConfig pipeline_config() {
  auto cfg = meshtrain::testing::tiny_train_config();
  cfg.data.mode = "packed";
  cfg.training.threads = 1;
  cfg.parallel.dp = 2;
  cfg.parallel.pp = 2;
  cfg.parallel.zero_stage = 1;
  return cfg;
}

// Routed experts over ep = 2 on two data-parallel ranks, with the balanced
// routing the recorded step assumes (plan/prediction.h).
train::TrainConfig moe_config() {
  auto cfg = meshtrain::testing::tiny_moe_config(2, false, 0.0);
  cfg.model.moe_force_balance = true;
  cfg.data.mode = "packed";
  cfg.parallel.dp = 2;
  cfg.parallel.ep = 2;
  return cfg;
}

// Two context-parallel ranks splitting every row (the K/V ring's buffers).
train::TrainConfig context_config() {
  auto cfg = meshtrain::testing::context_parallel_config();
  cfg.parallel.cp = 2;
  return cfg;
}

class RunMemory : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = meshtrain::testing::fresh_test_dir("mt_runmemory_"); }
  void TearDown() override { fs::remove_all(dir_); }

  // cfg on a dataset prepared on disk, one step, for train_main.
  train::TrainConfig on_disk(train::TrainConfig c) {
    std::ofstream corpus(dir_ / "corpus.txt");
    for (int i = 0; i < 40; ++i) corpus << "A short document, number " << i << ".\n%\n";
    corpus.close();
    data::PrepareOptions p;
    p.inputs = {(dir_ / "corpus.txt").string()};
    p.out_dir = (dir_ / "data").string();
    p.format = data::InputFormat::Fortune;
    p.overwrite = true;
    data::prepare_dataset(p);
    c.data.path = p.out_dir;
    c.metrics.run_dir = (dir_ / "run").string();
    c.training.steps = 1;
    return c;
  }

  // train_main with `limit` bytes available: the refusal, or "" when it ran.
  static std::string refusal(const train::TrainConfig& c, int64_t limit) {
    const MemoryLimit scoped(limit);
    ::testing::internal::CaptureStdout();
    try {
      EXPECT_EQ(train::train_main(c), 0);
      ::testing::internal::GetCapturedStdout();
      return "";
    } catch (const ConfigError& e) {
      ::testing::internal::GetCapturedStdout();
      return e.what();
    }
  }

  fs::path dir_;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

// `train` on the threads backend refuses one byte below the sum of its
// ranks' recorded peaks and starts at it; the refusal names each class's
// peak by category, the sum, what is available and what to change. The
// recorded peaks are the real ranks' tracker peaks; the formula's figure
// differs, so this config tells the two apart.
TEST_F(RunMemory, TrainIsRefusedAtTheRecordedPeakOfItsRanks) {
  const auto cfg = pipeline_config();
  const int64_t need = recorded_need(cfg);
  const auto real = real_peaks(cfg);
  for (int rank = 0; rank < world_of(cfg); ++rank)
    EXPECT_EQ(real[size_t(rank)], train::record_step(cfg, rank).peak.total_peak) << "rank " << rank;
  EXPECT_NE(train::estimate_rank_memory(cfg, cfg.parallel.dp).total() * world_of(cfg), need);

  const auto c = on_disk(cfg);
  const std::string msg = refusal(c, need - 1);
  EXPECT_TRUE(contains(msg, "the run does not fit")) << msg;
  EXPECT_TRUE(contains(msg, "4 ranks here = " + format_bytes(need))) << msg;
  const MemorySnapshot first = train::record_step(cfg, 0).peak, last = train::record_step(cfg, 3).peak;
  ASSERT_NE(first.total_peak, last.total_peak) << "the two pipeline stages are two classes";
  EXPECT_TRUE(contains(msg, "pp 0 tp 0 x 2: peak " + format_bytes(first.total_peak) + " (params " +
                                format_bytes(first.peak[size_t(MemCategory::Params)]) + ", grads "))
      << msg;
  EXPECT_TRUE(contains(msg, "pp 1 tp 0 x 2: peak " + format_bytes(last.total_peak))) << msg;
  EXPECT_TRUE(contains(msg, "optimizer " + format_bytes(first.peak[size_t(MemCategory::Optimizer)]))) << msg;
  EXPECT_TRUE(contains(msg, "activations " + format_bytes(first.peak[size_t(MemCategory::Activations)]))) << msg;
  EXPECT_TRUE(contains(msg, "MESHTRAIN_MEMORY_LIMIT")) << msg;
  for (const char* remedy : {"micro-batch", "parallel.zero_stage", "training.recompute = true", "more ranks"})
    EXPECT_TRUE(contains(msg, remedy)) << msg;
  EXPECT_EQ(refusal(c, need), "");
}

// A mixture of experts over expert-parallel ranks and a context-parallel
// layout: each accepted at exactly the recorded peaks (the real ranks'
// peaks), refused a byte below them.
TEST_F(RunMemory, MoeAndContextParallelLayoutsAreCheckedByTheirRecordedSteps) {
  for (const auto& cfg : {moe_config(), context_config()}) {
    SCOPED_TRACE(cfg.model.n_experts > 0 ? "moe, dp 2 ep 2" : "cp 2");
    const int64_t need = recorded_need(cfg);
    const auto real = real_peaks(cfg);
    EXPECT_EQ(real[0] + real[1], need);
    const auto c = on_disk(cfg);
    const std::string msg = refusal(c, need - 1);
    EXPECT_TRUE(contains(msg, "2 ranks here = " + format_bytes(need))) << msg;
    EXPECT_EQ(refusal(c, need), "");
  }
}

// Only the distinct rank classes are recorded (as `meshtrain plan` groups
// them), and their counts cover the mesh with the same sum as every rank's
// own step.
TEST(RunMemoryClasses, RankClassesCoverEveryRankOfTheLayout) {
  auto cfg = pipeline_config();
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;
  cfg.model.head_dim = 4;
  cfg.parallel.tp = 2;
  const auto classes = train::layout_peaks(cfg);
  int ranks = 0;
  int64_t need = 0;
  for (const auto& c : classes) {
    ranks += c.ranks;
    need += c.ranks * c.peak.total_peak;
  }
  EXPECT_EQ(ranks, world_of(cfg));
  EXPECT_LT(classes.size(), size_t(world_of(cfg)));
  EXPECT_EQ(need, recorded_need(cfg));
}

// Under mpirun each rank checks its own step for the ranks on its machine;
// above 80% of what is available a warning says how much it uses.
TEST(RunMemoryClasses, AnMpiRankCountsItsOwnStepForTheRanksOnItsMachine) {
  const auto cfg = pipeline_config();
  const train::ClassPeak mine = train::rank_peak(cfg, 3, 3);
  EXPECT_EQ(mine.ranks, 3);
  EXPECT_EQ(mine.peak.total_peak, train::record_step(cfg, 3).peak.total_peak);
  const int64_t need = 3 * mine.peak.total_peak;
  EXPECT_EQ(train::check_run_budget({mine}, AvailableMemory{need * 2, "test"}), "");
  const std::string warning = train::check_run_budget({mine}, AvailableMemory{need + need / 10, "test"});
  EXPECT_TRUE(contains(warning, "warning: predicted memory per rank")) << warning;
  EXPECT_TRUE(contains(warning, "rank 3 x 3: peak " + format_bytes(mine.peak.total_peak))) << warning;
  EXPECT_TRUE(contains(warning, "% of the")) << warning;
  try {
    train::check_run_budget({mine}, AvailableMemory{need - 1, "cgroup limit 1 GiB"});
    FAIL() << "three ranks' peaks do not fit in a byte less";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "3 ranks here = " + format_bytes(need))) << e.what();
    EXPECT_TRUE(contains(e.what(), "cgroup limit 1 GiB")) << e.what();
  }
}

// A 9.7B-parameter config: refused up front, not grown silently until the
// OOM killer ends it; the meta device records its step without memory.
TEST(RunMemoryClasses, AHugeModelIsRefusedBeforeAllocating) {
  auto c = meshtrain::testing::tiny_train_config();
  c.model.d_model = 8192;
  c.model.n_heads = 64;
  c.model.n_kv_heads = 8;
  c.model.head_dim = 128;
  c.model.ffn_hidden = 28672;
  c.model.n_layers = 12;
  c.model.vocab_size = 32000;
  c.model.max_seq_len = 256;
  c.data.seq_len = 256;
  c.model.finalize();
  ASSERT_GT(model::build_model_spec(c.model).total_params(), int64_t(9e9));
  const MemoryLimit machine(int64_t(100) << 30);
  try {
    train::check_run_memory(c, nullptr);
    FAIL() << "a run of more than 150 GB was accepted in 100 GiB";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "does not fit")) << e.what();
  }
  c.training.check_memory = false;  // the escape hatch
  EXPECT_NO_THROW(train::check_run_memory(c, nullptr));
}
