// Covers src/meshtrain/train/supervisor.cc (in-process restarts; tests/faults relaunches).
// The run loop around the step (run.h): a run whose every step was skipped
// fails, metrics write failures are reported, a resume drops the metrics
// of the steps it replays, SIGTERM stops after the step with a save, the
// evaluation rows do not depend on the layout, an asynchronous save is
// reported when it commits, and a failed job restarts in-process.
#include "meshtrain/train/run.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/train/run_dir.h"
#include "meshtrain/train/stop_signal.h"
#include "train_fixtures.h"
#include "support/test_dir.h"

using namespace meshtrain;
namespace fs = std::filesystem;
using meshtrain::testing::tiny_train_config;
using meshtrain::testing::varied_documents;
using meshtrain::testing::with_trainers;

namespace {

class RunLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = meshtrain::testing::fresh_test_dir("mt_runloop_");
    cfg_ = tiny_train_config();
    cfg_.metrics.run_dir = dir_.string();
    cfg_.metrics.jsonl = "metrics.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the loop on every rank; rank 0 logs to a file whose text is returned.
  std::string run(const train::TrainConfig& cfg, const std::function<void(train::Trainer&)>& setup = {},
                  train::RunEnd* end = nullptr) {
    const std::string log = (dir_ / "console.txt").string();
    std::FILE* console = std::fopen(log.c_str(), "w");
    try {
      with_trainers(cfg, ds_, val_, [&](train::Trainer& t) {
        if (setup) setup(t);
        const train::RunEnd e = train::run_training(t, t.context().rank == 0 ? console : nullptr);
        if (end && t.context().rank == 0) *end = e;
      });
    } catch (...) {
      std::fclose(console);
      throw;
    }
    std::fclose(console);
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  // cfg_ on a dataset prepared on disk, for train_main.
  train::TrainConfig on_disk_config() {
    std::ofstream(dir_ / "corpus.txt") << "one document\n%\nanother one here\n%\na third document\n%\nand a fourth\n";
    data::PrepareOptions p;
    p.inputs = {(dir_ / "corpus.txt").string()};
    p.out_dir = (dir_ / "data").string();
    p.format = data::InputFormat::Fortune;
    p.val_fraction = 0.25;
    p.overwrite = true;
    data::prepare_dataset(p);
    auto c = cfg_;
    c.data.path = p.out_dir;
    c.data.mode = "packed";
    c.metrics.run_dir = (dir_ / "run").string();
    return c;
  }

  fs::path dir_;
  train::TrainConfig cfg_;
  data::TokenDataset ds_ = varied_documents(64, 3);
  std::optional<data::TokenDataset> val_ = varied_documents(16, 9);
};

TEST_F(RunLoop, ARunWhoseEveryStepWasSkippedFails) {
  auto poison = [](train::Trainer& t) {
    t.set_after_reduction([](train::Trainer& tr) { tr.engine().owned_grad(0).data<float>()[0] = std::nanf(""); });
  };
  try {
    run(cfg_, poison);
    FAIL() << "a run that trained nothing ended successfully";
  } catch (const TrainingError& e) {
    EXPECT_NE(std::string(e.what()).find("every one of the 3 steps"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
}

TEST_F(RunLoop, MetricsWriteFailuresAreNotSilent) {
  auto c = cfg_;
  c.metrics.jsonl = "/dev/full";  // every write fails with ENOSPC
  ::testing::internal::CaptureStderr();
  try {
    run(c);
    ::testing::internal::GetCapturedStderr();
    FAIL() << "lost metrics went unreported";
  } catch (const TrainingError& e) {
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(std::string(e.what()).find("could not be written"), std::string::npos) << e.what();
    EXPECT_NE(err.find("cannot write metrics to /dev/full"), std::string::npos) << err;
  }
}

TEST_F(RunLoop, AResumeDropsTheMetricsOfTheStepsItReplays) {
  const std::string path = (dir_ / "m.jsonl").string();
  {
    std::ofstream out(path);
    out << R"({"event":"baseline","unigram_entropy":3.2})" "\n";
    for (int s = 1; s <= 6; ++s) out << R"({"loss":5.0,"step":)" << s << "}\n";
    out << R"({"event":"eval","step":4,"val_loss":5.1})" "\n";
    out << R"({"event":"restart","restart":1,"resumed_step":2,"step":7})" "\n";
    out << R"({"loss":4.9,"st)";  // torn by a crash
  }
  EXPECT_EQ(train::truncate_metrics_after(path, 4), 6);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text,
            R"({"event":"baseline","unigram_entropy":3.2})" "\n"
            R"({"loss":5.0,"step":1})" "\n" R"({"loss":5.0,"step":2})" "\n" R"({"loss":5.0,"step":3})" "\n"
            R"({"loss":5.0,"step":4})" "\n" R"({"event":"eval","step":4,"val_loss":5.1})" "\n"
            R"({"event":"restart","restart":1,"resumed_step":2,"step":7})" "\n");
}

TEST_F(RunLoop, SigtermStopsAfterTheStepWithASave) {
  train::StopSignals signals;
  auto c = cfg_;
  c.training.steps = 5;
  c.checkpoint.every = 0;  // no regular saves: the stop saves anyway
  int reductions = 0;
  auto term_in_step_2 = [&](train::Trainer& t) {
    if (t.context().rank != 0) return;
    t.set_after_reduction([&](train::Trainer&) {
      // raise(): delivered to this thread before it returns, so the stop is
      // seen at the end of step 2 (kill(getpid()) may land on another
      // thread later, after more steps on a loaded machine).
      if (++reductions == 2) ::raise(SIGTERM);
    });
  };
  train::RunEnd end = train::RunEnd::Finished;
  const std::string out = run(c, term_in_step_2, &end);
  train::StopSignals::reset();
  EXPECT_EQ(end, train::RunEnd::Stopped);
  EXPECT_NE(out.find("stopped by SIGTERM after step 2"), std::string::npos) << out;
  EXPECT_EQ(checkpoint::CheckpointReader::open((dir_ / "checkpoints").string()).step(), 2);
  // Running again resumes at step 2 and finishes; each step is recorded once.
  const std::string again = run(c);
  EXPECT_NE(again.find("resumed from"), std::string::npos) << again;
  std::ifstream in(dir_ / "metrics.jsonl");
  std::vector<int64_t> steps;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("event")) steps.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST_F(RunLoop, EvaluationUsesTheSameRowsUnderEveryLayout) {
  auto c = cfg_;
  c.training.micro_batch = 2;
  c.training.eval_rows = 7;
  std::vector<train::EvalResult> results;
  for (int dp : {1, 3}) {
    c.parallel.dp = dp;
    train::EvalResult r;
    with_trainers(c, ds_, val_, [&](train::Trainer& t) {
      const auto e = t.evaluate();
      if (t.context().rank == 0) r = e;
    });
    results.push_back(r);
  }
  EXPECT_GT(results[0].targets, 0);
  EXPECT_EQ(results[0].targets, results[1].targets);
  // Other rows would move the loss by far more than 1e-6; the same rows cut
  // into other micro-batch shapes round differently in oneDNN's AVX2 GEMM.
  EXPECT_NEAR(results[0].loss, results[1].loss, 1e-6 * results[0].loss);
}

TEST_F(RunLoop, AnAsynchronousSaveIsReportedWhenItCommits) {
  auto c = cfg_;
  c.training.steps = 4;
  c.checkpoint.every = 2;
  c.checkpoint.async = true;
  const std::string out = run(c);
  EXPECT_NE(out.find("checkpoint step 2 staged"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoint committed -> " + (dir_ / "checkpoints" / "step-00000002").string()), std::string::npos)
      << out;
  EXPECT_NE(out.find("checkpoint committed -> " + (dir_ / "checkpoints" / "step-00000004").string()), std::string::npos)
      << out;
  EXPECT_EQ(out.find("(async)"), std::string::npos) << "announced before it was written: " << out;
}

// train_main on a prepared dataset: a rank dying in backward makes every
// rank stop; the job restarts in-process from the latest checkpoint, logs
// the restart and the steps lost, and ends where an uninterrupted run ends.
TEST_F(RunLoop, AFailedJobRestartsInProcess) {
  auto c = on_disk_config();
  c.parallel.dp = 2;
  c.training.steps = 4;
  c.checkpoint.every = 2;
  c.comm.restart_on_failure = true;
  c.comm.max_restarts = 2;
  fault::arm(fault::parse_rule("backward@1#13:throw"));  // in step 4 (2 layers + head: 4 units a step)
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = train::train_main(c);
  const std::string out = ::testing::internal::GetCapturedStdout(), err = ::testing::internal::GetCapturedStderr();
  fault::disarm();
  EXPECT_EQ(code, 0) << out << err;
  EXPECT_NE(err.find("injected fault at backward"), std::string::npos) << err;
  EXPECT_NE(out.find("restart 1 of 2: resumed at step 2, 1 step(s) since that checkpoint lost"), std::string::npos)
      << out;
  std::ifstream in(fs::path(c.metrics.run_dir) / "metrics.jsonl");
  int restarts = 0;
  for (std::string line; std::getline(in, line);)
    if (nlohmann::json::parse(line).value("event", "") == "restart") ++restarts;
  EXPECT_EQ(restarts, 1);
  EXPECT_EQ(checkpoint::CheckpointReader::open(c.metrics.run_dir + "/checkpoints").step(), 4);
  // With no restart allowed the same failure ends the job.
  c.metrics.run_dir = (dir_ / "run2").string();
  c.comm.restart_on_failure = false;
  fault::arm(fault::parse_rule("backward@1#13:throw"));
  ::testing::internal::CaptureStdout();
  EXPECT_THROW(train::train_main(c), fault::InjectedFault);
  ::testing::internal::GetCapturedStdout();
  fault::disarm();
}

// train_main on a run directory another run holds is refused before
// anything is written there (run_dir.h).
TEST_F(RunLoop, TrainingOnADirectoryInUseIsRefused) {
  const auto c = on_disk_config();
  const train::RunDirectoryLock other(c.metrics.run_dir);
  ::testing::internal::CaptureStdout();
  EXPECT_THROW(train::train_main(c), ConfigError);
  ::testing::internal::GetCapturedStdout();
  EXPECT_FALSE(fs::exists(fs::path(c.metrics.run_dir) / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(fs::path(c.metrics.run_dir) / "checkpoints"));
}

// More compute threads than the cores this process may use only slow every
// step down: capped, with a warning.
TEST_F(RunLoop, TooManyComputeThreadsAreCappedWithAWarning) {
  auto c = on_disk_config();
  c.training.threads = 1000;
  c.training.steps = 1;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(train::train_main(c), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("warning: training.threads = 1000 exceeds the " + std::to_string(hardware_cores()) + " core(s)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("| " + std::to_string(hardware_cores()) + " compute threads per rank"), std::string::npos) << out;
}

TEST(Supervisor, RestartsOnlyWhatARestartCanGetPast) {
  EXPECT_TRUE(train::restartable(CommAborted("peer died")));
  EXPECT_TRUE(train::restartable(CommTimeout("late")));
  EXPECT_TRUE(train::restartable(fault::InjectedFault("rank died")));
  EXPECT_TRUE(train::restartable(CheckpointError("disk hiccup")));
  EXPECT_FALSE(train::restartable(ConfigError("bad config")));
  EXPECT_FALSE(train::restartable(DataError("bad data")));
  EXPECT_FALSE(train::restartable(TrainingError("nothing trained")));
}

}  // namespace
