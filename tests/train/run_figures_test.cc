// Covers src/meshtrain/train/progress.cc (the run record and the MFU peak of a run).
// The figures a run reports (docs/cli.md, "Progress" and "Reports"): the run
// record counts the whole model under tensor parallelism, MFU never exceeds
// 100% (a step faster than the cached peak raises it, recorded and cached),
// and exposed communication never exceeds the communication's time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "meshtrain/core/threading.h"
#include "meshtrain/train/peak_flops.h"
#include "meshtrain/train/progress.h"
#include "train_fixtures.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

class RunFigures : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("mt_figures_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const char* old = std::getenv("XDG_CACHE_HOME");
    if (old) saved_cache_ = old, had_cache_ = true;
    ::setenv("XDG_CACHE_HOME", (dir_ / "cache").c_str(), 1);
    cfg_ = testing::tiny_train_config();
    cfg_.metrics.run_dir = dir_.string();
    cfg_.metrics.jsonl = "metrics.jsonl";
  }
  void TearDown() override {
    if (had_cache_) ::setenv("XDG_CACHE_HOME", saved_cache_.c_str(), 1);
    else ::unsetenv("XDG_CACHE_HOME");
    fs::remove_all(dir_);
  }

  // Runs the loop on every rank; returns rank 0's console text.
  std::string run(const train::TrainConfig& cfg) {
    const std::string log = (dir_ / "console.txt").string();
    std::FILE* console = std::fopen(log.c_str(), "w");
    testing::with_trainers(cfg, ds_, std::nullopt, [&](train::Trainer& t) {
      train::run_training(t, t.context().rank == 0 ? console : nullptr);
    });
    std::fclose(console);
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::vector<nlohmann::json> records() const {
    std::vector<nlohmann::json> out;
    std::ifstream in(dir_ / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  fs::path dir_;
  std::string saved_cache_;
  bool had_cache_ = false;
  train::TrainConfig cfg_;
  data::TokenDataset ds_ = testing::varied_documents(64, 3);
};

TEST_F(RunFigures, TheRunRecordCountsTheWholeModelAndMfuStaysAtOrBelowThePeak) {
  auto c = cfg_;
  c.parallel.tp = 2;  // rank 0 holds about half of the weights
  c.training.threads = 1;
  // A cached peak far below what any step reaches (as one measured on a
  // machine busy with something else would be), for every core count.
  nlohmann::json cache;
  for (int busy = 1; busy <= hardware_cores(); ++busy)
    cache["peaks"][train::peak_key(DType::F32, busy)] = {{"per_core_flops", 1000.0}, {"measured", "test"}};
  fs::create_directories(dir_ / "cache" / "meshtrain");
  std::ofstream(dir_ / "cache" / "meshtrain" / "peak_flops.json") << cache.dump();

  const std::string out = run(c);
  double peak = 0;
  int runs = 0, raises = 0, steps = 0;
  for (const auto& j : records()) {
    const std::string event = j.value("event", "");
    if (event == "run") {
      ++runs;
      EXPECT_EQ(j["parameters"].get<int64_t>(), train::whole_model_parameters(c)) << "not rank 0's tp share";
      EXPECT_EQ(j["peak"]["cores"].get<int>(), 2) << "two ranks of one thread";
      EXPECT_EQ(j["peak"]["dtype"], "f32");
      EXPECT_DOUBLE_EQ(j["peak"]["per_core_gflops"].get<double>(), 1e-6) << "the cached figure";
      peak = j["peak_gflops"].get<double>();
    } else if (event == "peak") {
      ++raises;
      EXPECT_GE(j["peak_gflops"].get<double>(), j["step_gflops"].get<double>());
      peak = j["peak_gflops"].get<double>();
    } else if (!j.contains("event")) {
      ++steps;
      EXPECT_LE(j["gflops"].get<double>(), peak * (1 + 1e-12)) << "step " << j["step"] << ": MFU above 100%";
    }
  }
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(steps, 3);
  EXPECT_GE(raises, 1) << "the first step ran faster than 1000 FLOP/s per core";
  EXPECT_NE(out.find("note: step 1 ran at"), std::string::npos) << out;
  // The raised peak is cached for the next run.
  std::ifstream in(dir_ / "cache" / "meshtrain" / "peak_flops.json");
  const auto after = nlohmann::json::parse(in);
  EXPECT_GT(after["peaks"][train::peak_key(DType::F32, std::min(2, hardware_cores()))]["per_core_flops"].get<double>(),
            1000.0);
}

TEST_F(RunFigures, ExposedCommunicationNeverExceedsItsTotal) {
  for (int dp : {1, 2}) {
    auto c = cfg_;
    c.parallel.dp = dp;
    c.parallel.zero_stage = dp == 2 ? 3 : 0;  // gathers, reduce-scatters and their waits
    c.training.threads = 1;
    c.metrics.run_dir = (dir_ / ("dp" + std::to_string(dp))).string();
    run(c);
    std::ifstream in(fs::path(c.metrics.run_dir) / "metrics.jsonl");
    int steps = 0;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("event")) continue;
      ++steps;
      const double total = j["comm_s"].get<double>(), exposed = j["comm_exposed_s"].get<double>();
      EXPECT_LE(exposed, total) << "dp=" << dp << " step " << j["step"];
      EXPECT_GE(exposed, 0.0);
      if (dp == 1) EXPECT_EQ(exposed, 0.0) << "one rank communicates nothing, so waits for nothing";
    }
    EXPECT_EQ(steps, 3);
  }
}

}  // namespace
