// Covers src/meshtrain/train/progress.cc (the run record and the MFU peak of a run).
// The figures a run reports (docs/cli.md, "Progress" and "Reports"): the run
// record counts the whole model under tensor parallelism, MFU never exceeds
// 100% (a step faster than the cached peak raises it, recorded and cached),
// and exposed communication never exceeds the communication's time.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/core/threading.h"
#include "meshtrain/train/peak_flops.h"
#include "meshtrain/train/progress.h"
#include "support/scoped_env.h"
#include "train_fixtures.h"

using namespace meshtrain;
namespace fs = std::filesystem;
namespace fx = meshtrain::testing;

namespace {

class RunFigures : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = fx::tiny_train_config();
    cfg_.metrics.run_dir = dir_.string();
    cfg_.metrics.jsonl = "metrics.jsonl";
  }

  // Runs the loop on every rank (`before` first); returns rank 0's console text.
  std::string run(const train::TrainConfig& cfg, const std::function<void(train::Trainer&)>& before = {}) {
    const std::string log = (dir_ / "console.txt").string();
    std::FILE* console = std::fopen(log.c_str(), "w");
    fx::with_trainers(cfg, ds_, std::nullopt, [&](train::Trainer& t) {
      if (before) before(t);
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

  const fs::path dir_ = fx::fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const fx::ScopedEnv cache_{"XDG_CACHE_HOME", (dir_ / "cache").c_str()};
  train::TrainConfig cfg_;
  data::TokenDataset ds_ = fx::varied_documents(64, 3);
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

  int64_t whole = 0, rank0 = 0;
  const std::string out = run(c, [&](train::Trainer& t) {
    if (t.context().rank != 0) return;
    whole = train::whole_model_parameters(t.config());
    rank0 = t.model_spec().total_params();
  });
  EXPECT_LT(rank0, whole) << "rank 0 holds a tp slice";
  // Each step's rate against the peak in force once the step was seen (a
  // raise follows the step it was for): never above it.
  double peak = 0;
  int runs = 0, raises = 0;
  std::vector<double> pending;  // step rates not yet checked
  auto check = [&] {
    for (double g : pending) EXPECT_LE(g, peak * (1 + 1e-12)) << "MFU above 100%";
    pending.clear();
  };
  for (const auto& j : records()) {
    const std::string event = j.value("event", "");
    if (event == "run") {
      ++runs;
      EXPECT_EQ(j["parameters"].get<int64_t>(), whole) << "the whole model, not rank 0's tp share";
      EXPECT_EQ(j["peak"]["cores"].get<int>(), 2) << "two ranks of one thread";
      EXPECT_EQ(j["peak"]["dtype"], "f32");
      EXPECT_DOUBLE_EQ(j["peak"]["per_core_gflops"].get<double>(), 1e-6) << "the cached figure";
      peak = j["peak_gflops"].get<double>();
    } else if (event == "peak") {
      ++raises;
      EXPECT_GE(j["peak_gflops"].get<double>(), j["step_gflops"].get<double>());
      peak = j["peak_gflops"].get<double>();
    } else if (!j.contains("event")) {
      check();  // the previous step had its chance to raise the peak
      pending.push_back(j["gflops"].get<double>());
    }
  }
  check();
  EXPECT_EQ(runs, 1);
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
