// What the command line refuses before it writes or allocates: report and
// timeline outputs that are their own inputs or exist already, a verify
// layout that cannot run (before its data is prepared), plans that cannot
// run and meshes too large to list slowly, models, batches and messages
// that do not fit in memory (eval, generate, bench comm), and a run
// directory another run holds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>

#include "cli/cli_test_util.h"

namespace meshtrain::cli::testing {
namespace {

// MESHTRAIN_MEMORY_LIMIT for the scope: what counts as available memory.
class MemoryLimit {
 public:
  explicit MemoryLimit(const std::string& bytes) { ::setenv("MESHTRAIN_MEMORY_LIMIT", bytes.c_str(), 1); }
  ~MemoryLimit() { ::unsetenv("MESHTRAIN_MEMORY_LIMIT"); }
};

// A run directory with a metrics file, as a finished run leaves it.
std::string run_with_metrics(const TempDir& dir) {
  const std::string run = dir / "run";
  write_file(run + "/metrics.jsonl",
             "{\"event\":\"run\",\"model\":\"tiny\"}\n"
             "{\"step\":1,\"loss\":5.5,\"N\":10,\"seconds\":0.1,\"tokens_per_s\":100}\n");
  return run;
}

TEST(CliOutputs, ReportNeverWritesOverItsInputsNorAnExistingFileWithoutForce) {
  TempDir dir;
  const std::string run = run_with_metrics(dir);
  const std::string metrics = read_file(run + "/metrics.jsonl");
  expect_failure({"report", run, "--out", run + "/metrics.jsonl"}, "is the input");
  expect_failure({"report", run, "--out", run + "/metrics.jsonl", "--force"}, "is the input");
  EXPECT_EQ(read_file(run + "/metrics.jsonl"), metrics) << "the run's metrics were overwritten";
  // An existing page is replaced only with --force; a user's X.tmp is never touched.
  const std::string page = dir / "report.html";
  write_file(page, "my notes");
  write_file(page + ".tmp", "the user's own file");
  expect_failure({"report", run, "--out", page}, "already exists; pass --force");
  EXPECT_EQ(read_file(page), "my notes");
  const Result forced = run_cli({"report", run, "--out", page, "--force"});
  ASSERT_EQ(forced.code, 0) << forced.err;
  EXPECT_TRUE(contains(read_file(page), "<html")) << read_file(page).substr(0, 200);
  EXPECT_EQ(read_file(page + ".tmp"), "the user's own file");
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find("report.html.tmp."), std::string::npos) << "left behind: " << e.path();
}

TEST(CliOutputs, TimelineNeverWritesOverItsInputsNorAnExistingFileWithoutForce) {
  TempDir dir;
  const std::string run = run_with_metrics(dir);
  const std::string metrics = read_file(run + "/metrics.jsonl");
  expect_failure({"timeline", run, "--out", run + "/metrics.jsonl", "--force"}, "is the input");
  EXPECT_EQ(read_file(run + "/metrics.jsonl"), metrics);
  write_file(dir / "t.svg", "kept");
  expect_failure({"timeline", run, "--out", dir / "t.svg"}, "already exists; pass --force");
  EXPECT_EQ(read_file(dir / "t.svg"), "kept");
}

// tp = 4 with 6 heads, more stages than blocks, cp not cutting the rows,
// reproducible mode over 3 replicas: refused before anything is prepared.
TEST(CliVerify, EveryRefusedLayoutIsRefusedBeforeTheDataIsPrepared) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const std::vector<std::string> heads6 = {"--set", "model.n_heads=6", "--set", "model.n_kv_heads=6",
                                           "--set", "model.d_model=24"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  expect_failure(with({"verify", cfg, "--layout", "tp=4"}, heads6), "does not split over parallel.tp = 4");
  expect_failure({"verify", cfg, "--layout", "pp=8"}, "every chunk needs at least one block");
  expect_failure({"verify", cfg, "--layout", "cp=3"}, "parallel.cp = 3 cuts every row");
  expect_failure({"verify", cfg, "--layout", "dp=3", "--bitwise"}, "must be a power of two");
  expect_failure({"verify", cfg, "--layout", "dp=2,sp=on"}, "has no effect with parallel.tp = 1");
  EXPECT_FALSE(fs::exists(dir / "data")) << "the dataset was prepared for a command that could not run";
}

TEST(CliPlan, TheHeaderNamesTheBatchEveryMeshIsEvaluatedAt) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);  // micro_batch 2 x grad_accum 1 = 2 rows
  const Result r = run_cli({"plan", cfg, "--devices", "7"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "global batch fixed at 2 rows")) << r.out;
  EXPECT_TRUE(contains(r.out, "a global batch of 2 rows does not split over 7 data-parallel replicas")) << r.out;
  EXPECT_TRUE(contains(r.out, "no mesh of 7 devices can run this model with a global batch of 2 rows")) << r.out;
}

// Meshes whose pipeline cannot hold the model are refused before their
// schedules are built (quadratic in pp): 131072 devices list at once.
TEST(CliPlan, AHugeDeviceCountIsListedQuickly) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = run_cli({"plan", cfg, "--devices", "131072"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "meshes of 131072 devices")) << r.out;
  EXPECT_LT(s, 10.0) << "plan --devices 131072 took " << s << " s";
}

TEST(CliPlan, ExpertCountsAreBoundedBeforeAnythingIsSized) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  expect_failure({"plan", cfg, "--set", "model.n_experts=1000000"}, "model.n_experts = 1000000: at most 4096");
  expect_failure({"plan", cfg, "--set", "model.n_experts=4", "--set", "model.moe_capacity_factor=inf"},
                 "model.moe_capacity_factor = inf");
}

// eval, generate and bench comm compare what they will hold with what is
// available (here capped at 64 KiB), as train does, instead of running into
// bad_alloc or the OOM killer.
TEST(CliMemory, EvalGenerateAndBenchCommCheckTheirMemoryFirst) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  ASSERT_EQ(run_cli({"train", cfg}).code, 0);
  const std::string ckpt = dir / "run/checkpoints";
  {
    const MemoryLimit tiny("65536");
    expect_failure({"generate", "--from", ckpt, "--prompt", "A", "--tokens", "2"}, "does not fit");
    expect_failure({"eval", "--from", ckpt, "--data", dir / "data"}, "does not fit");
    expect_failure({"bench", "comm", "--ranks", "2", "--max-bytes", "1M", "--ops", "all_reduce"},
                   "Lower --max-bytes");
  }
  EXPECT_EQ(run_cli({"generate", "--from", ckpt, "--prompt", "A", "--tokens", "2"}).code, 0);
  expect_failure({"bench", "comm", "--ranks", "2", "--max-bytes", "1000000G"}, "does not fit");
}

// A second run on a directory another run holds is refused, naming it.
TEST(CliTrain, ASecondRunOnTheSameDirectoryIsRefused) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  ASSERT_EQ(run_cli({"train", cfg}).code, 0);
  // Hold the lock as a running `train` would (an open file description of
  // this process: the kernel's lock is per description).
  const std::string lock = dir / "run/.meshtrain-lock";
  ASSERT_TRUE(fs::exists(lock));
  write_file(lock, "pid 1 on elsewhere, since yesterday: meshtrain train other.toml\n");
  const int fd = ::open(lock.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  expect_failure({"train", cfg},
                 "is in use by another run (pid 1 on elsewhere, since yesterday: meshtrain train other.toml)");
  ::close(fd);
  const Result again = run_cli({"train", cfg});  // released: the same run goes on (nothing left to train)
  EXPECT_EQ(again.code, 0) << again.err;
}

// A system directory or a directory of someone's files is not a run's.
TEST(CliTrain, SystemAndForeignDirectoriesAreRefusedAndNothingIsWritten) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  expect_failure({"train", cfg, "--set", "metrics.run_dir=/etc/meshtrain-test-run"}, "is a system directory");
  EXPECT_FALSE(fs::exists("/etc/meshtrain-test-run"));
  expect_failure({"train", cfg, "--set", "metrics.run_dir=\"\""}, "metrics.run_dir is empty");
  write_file(dir / "notes/todo.txt", "keep me");
  expect_failure({"train", cfg, "--set", "metrics.run_dir=\"" + dir / "notes" + "\""},
                 "holds other files ('todo.txt') and no meshtrain run");
  EXPECT_EQ(read_file(dir / "notes/todo.txt"), "keep me");
  EXPECT_FALSE(fs::exists(dir / "notes/checkpoints"));
}

}  // namespace
}  // namespace meshtrain::cli::testing
