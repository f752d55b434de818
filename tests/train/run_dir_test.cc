// Covers src/meshtrain/train/run_dir.cc and the metrics file's guards in metrics.cc.
// A run writes only into a directory of its own: never a system directory,
// never a directory of other files, never a metrics file that is not its
// own (not truncated, not rewritten, not appended to), and one run at a
// time, the second one naming the first. A step's records reach the
// metrics file before its checkpoint commits.
#include "meshtrain/train/run_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "meshtrain/core/fault_injection.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/run.h"
#include "train_fixtures.h"
#include "support/test_dir.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

class RunDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = meshtrain::testing::fresh_test_dir("mt_rundir_");
    cfg_ = meshtrain::testing::tiny_train_config();
    cfg_.metrics.run_dir = (dir_ / "run").string();
    cfg_.metrics.jsonl = "metrics.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string refusal(const train::TrainConfig& c) const {
    try {
      train::check_run_directory(c);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  static std::string text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
  train::TrainConfig cfg_;
};

// `--set metrics.jsonl=/etc/passwd` once kept only the JSON lines of
// whatever file it named.
TEST_F(RunDir, AFileThatIsNotThisRunsMetricsIsNeverTouched) {
  const fs::path victim = dir_ / "passwd";
  const std::string content = "root:x:0:0:root:/root:/bin/bash\n{\"step\": 9}\n";
  std::ofstream(victim) << content;
  auto c = cfg_;
  c.metrics.jsonl = victim.string();
  EXPECT_NE(refusal(c).find("metrics.jsonl = '" + victim.string() + "' leads outside metrics.run_dir"),
            std::string::npos)
      << refusal(c);
  c.metrics.jsonl = "../passwd";
  EXPECT_NE(refusal(c).find("leads outside metrics.run_dir"), std::string::npos) << refusal(c);
  // Inside the run directory, under the metrics file's name.
  fs::create_directories(cfg_.metrics.run_dir);
  const fs::path inside = fs::path(cfg_.metrics.run_dir) / "metrics.jsonl";
  fs::copy_file(victim, inside);
  EXPECT_NE(refusal(cfg_).find("does not hold meshtrain metrics"), std::string::npos) << refusal(cfg_);
  // The writer and the resume's rewrite refuse it too, whoever calls them.
  for (const fs::path& p : {victim, inside}) {
    EXPECT_THROW(train::truncate_metrics_after(p.string(), 0), ConfigError);
    EXPECT_THROW(train::MetricsWriter(p.string()), ConfigError);
    EXPECT_EQ(text(p), content) << p;
  }
  // A link to it is not followed either.
  fs::remove(inside);
  fs::create_symlink(victim, inside);
  EXPECT_NE(refusal(cfg_).find("is a symbolic link"), std::string::npos) << refusal(cfg_);
  EXPECT_EQ(text(victim), content);
  // A device may be written to (no file to destroy): /dev/null discards.
  c = cfg_;
  c.metrics.jsonl = "/dev/null";
  fs::remove(inside);
  EXPECT_EQ(refusal(c), "");
}

TEST_F(RunDir, AMetricsFileOfARunIsRewrittenOnlyWhenRecordsAreDropped) {
  const fs::path m = dir_ / "m.jsonl";
  std::ofstream(m) << "{\"event\":\"run\"}\n{\"step\":1}\n{\"step\":2}\n";
  const auto before = fs::last_write_time(m);
  EXPECT_EQ(train::truncate_metrics_after(m.string(), 2), 0);
  EXPECT_EQ(fs::last_write_time(m), before) << "nothing to drop: the file is left as it is";
  EXPECT_EQ(train::truncate_metrics_after(m.string(), 1), 2);
  EXPECT_EQ(text(m), "{\"event\":\"run\"}\n{\"step\":1}\n");
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
}

TEST_F(RunDir, SystemDirectoriesAndDirectoriesOfOtherFilesAreRefused) {
  for (const char* system : {"/", "/etc", "/etc/meshtrain-run", "/usr/lib/run", "/proc/self", "/tmp", "/home"}) {
    auto c = cfg_;
    c.metrics.run_dir = system;
    EXPECT_NE(refusal(c).find("is a system directory"), std::string::npos) << system << ": " << refusal(c);
  }
  EXPECT_FALSE(train::is_system_directory((dir_ / "run").string()));
  auto c = cfg_;
  c.checkpoint.dir = "/etc/ckpt";
  EXPECT_NE(refusal(c).find("checkpoint.dir = '/etc/ckpt' is a system directory"), std::string::npos) << refusal(c);
  // A directory of someone's files.
  fs::create_directories(cfg_.metrics.run_dir);
  std::ofstream(fs::path(cfg_.metrics.run_dir) / "thesis.tex") << "\\documentclass{article}\n";
  EXPECT_NE(refusal(cfg_).find("holds other files ('thesis.tex') and no meshtrain run"), std::string::npos)
      << refusal(cfg_);
  c = cfg_;
  c.metrics.allow_nonempty_run_dir = true;
  EXPECT_EQ(refusal(c), "");
  // A run's directory: its lock file, its metrics or its checkpoints say so.
  std::ofstream(fs::path(cfg_.metrics.run_dir) / "metrics.jsonl") << "{\"step\":1}\n";
  EXPECT_EQ(refusal(cfg_), "");
  fs::remove(fs::path(cfg_.metrics.run_dir) / "metrics.jsonl");
  std::ofstream(fs::path(cfg_.metrics.run_dir) / train::kRunLockFile) << "";
  EXPECT_EQ(refusal(cfg_), "");
  // A checkpoint.dir of someone's files: a save clears .tmp-* directories there.
  c = cfg_;
  c.checkpoint.dir = (dir_ / "home").string();
  fs::create_directories(dir_ / "home" / ".tmp-build");
  EXPECT_NE(refusal(c).find("holds other files ('.tmp-build') and no checkpoints"), std::string::npos) << refusal(c);
  // A file where the directory should be.
  c = cfg_;
  c.metrics.run_dir = (fs::path(cfg_.metrics.run_dir) / "thesis.tex").string();
  EXPECT_NE(refusal(c).find("exists and is not a directory"), std::string::npos) << refusal(c);
}

TEST_F(RunDir, AnEmptyRunDirectoryIsNamedByItsKey) {
  try {
    train::parse_config("[data]\npath = \"runs/data\"\n", {"metrics.run_dir="});
    ADD_FAILURE() << "an empty metrics.run_dir was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.run_dir is empty"), std::string::npos) << e.what();
  }
}

TEST_F(RunDir, OneRunAtATimeAndTheSecondNamesTheFirst) {
  std::optional<train::RunDirectoryLock> first;
  first.emplace(cfg_.metrics.run_dir);
  try {
    train::RunDirectoryLock second(cfg_.metrics.run_dir);
    ADD_FAILURE() << "two runs locked one directory";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("is in use by another run (pid " + std::to_string(::getpid()) + " on "), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("since "), std::string::npos) << msg;
  }
  // The supervisor that holds it for its job lets the job's rank 0 in.
  ::setenv("MESHTRAIN_LOCK_HOLDER", std::to_string(::getpid()).c_str(), 1);
  EXPECT_NO_THROW(train::RunDirectoryLock job(cfg_.metrics.run_dir));
  ::unsetenv("MESHTRAIN_LOCK_HOLDER");
  first.reset();  // released: the next run goes ahead
  EXPECT_NO_THROW(train::RunDirectoryLock next(cfg_.metrics.run_dir));
}

// A step's records are written before its checkpoint commits: a crash
// right after the commit (here: at `latest`) loses no record of a step the
// checkpoint holds.
TEST_F(RunDir, ARecordOfACommittedStepSurvivesACrashAfterTheCommit) {
  auto c = cfg_;
  c.training.steps = 4;
  c.checkpoint.every = 2;
  const auto ds = meshtrain::testing::varied_documents(64, 3);
  fault::arm(fault::parse_rule("commit.latest#1:throw"));
  EXPECT_THROW(meshtrain::testing::with_trainers(c, ds, std::nullopt,
                                      [&](train::Trainer& t) {
                                        std::FILE* console = t.context().rank == 0 ? std::fopen("/dev/null", "w") : nullptr;
                                        try {
                                          train::run_training(t, console);
                                        } catch (...) {
                                          if (console) std::fclose(console);
                                          throw;
                                        }
                                        if (console) std::fclose(console);
                                      }),
               fault::InjectedFault);
  fault::disarm();
  std::vector<int64_t> steps;
  std::ifstream in(fs::path(c.metrics.run_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("event")) steps.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2})) << "the committed step 2 has its record";
}

}  // namespace
