// Stragglers and hangs (docs/comm.md): every rank's step times, the rule
// that names a straggler, the judgement of a hung rank, the heartbeat that
// ends the job naming it, the config keys, and a run whose rank 1 is slowed
// by a fault point naming it in metrics.jsonl.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "meshtrain/comm/launch.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/train/heartbeat.h"
#include "meshtrain/train/rank_timing.h"
#include "meshtrain/train/run.h"
#include "meshtrain/train/straggler.h"
#include "support/test_dir.h"
#include "train/config_error.h"
#include "train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::train;
namespace fs = std::filesystem;

namespace {

// Four ranks whose compute times are `compute` (no time in collectives).
RankTimes times_of(std::vector<double> compute) { return {compute, std::vector<double>(compute.size(), 0.0)}; }

TEST(RankTimes, ComputeIsTheStepOutsideCollectivesAndTheSlowestHasTheMost) {
  const RankTimes t{{1.0, 1.0, 1.0}, {0.7, 0.2, 0.75}};
  EXPECT_DOUBLE_EQ(t.compute_s(1), 0.8);
  EXPECT_EQ(t.slowest(), 1);
  EXPECT_DOUBLE_EQ(t.median_compute_s(), 0.3);
  const nlohmann::json j = t.to_json();
  EXPECT_EQ(j["slowest"], 1);
  EXPECT_EQ(j["compute_s"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["step_s"][2].get<double>(), 1.0);
}

TEST(StragglerWatch, NamesARankSlowForThreeStepsInARowAndSaysWhenItRecovers) {
  StragglerWatch w(1.5, {"a", "b", "c", "d"});
  std::vector<std::string> lines;
  for (int step = 1; step <= 2; ++step) EXPECT_TRUE(w.observe(times_of({0.1, 0.1, 0.5, 0.1}), lines).empty());
  EXPECT_TRUE(lines.empty()) << "two slow steps name nobody";
  const auto named = w.observe(times_of({0.1, 0.1, 0.5, 0.1}), lines);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 2);
  EXPECT_EQ(named[0].host, "c");
  EXPECT_DOUBLE_EQ(named[0].ratio, 5.0);
  EXPECT_EQ(named[0].steps, 3);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("rank 2 (host c) is a straggler"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("5.00x the median"), std::string::npos) << lines[0];
  lines.clear();
  EXPECT_EQ(w.observe(times_of({0.1, 0.1, 0.5, 0.1}), lines).size(), 1u);
  EXPECT_TRUE(lines.empty()) << "named once, not every step";
  EXPECT_TRUE(w.observe(times_of({0.1, 0.1, 0.12, 0.1}), lines).empty());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("rank 2 (host c) is no longer a straggler"), std::string::npos) << lines[0];
}

TEST(StragglerWatch, OfTwoRanksTheSlowerIsComparedWithTheFaster) {
  StragglerWatch w(1.5, {"a", "b"});
  std::vector<std::string> lines;
  std::vector<Straggler> named;
  for (int step = 0; step < 3; ++step) named = w.observe(times_of({0.1, 0.2}), lines);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 1);
  EXPECT_DOUBLE_EQ(named[0].ratio, 2.0);
}

TEST(StragglerWatch, AnInterruptedRunTinyExcessesAndFactorZeroNameNobody) {
  std::vector<std::string> lines;
  StragglerWatch w(1.5, {"a", "b", "c"});
  for (int step = 0; step < 6; ++step)  // slow every other step
    EXPECT_TRUE(w.observe(times_of(step % 2 ? std::vector<double>{0.1, 0.1, 0.1} : std::vector<double>{0.1, 0.4, 0.1}),
                          lines).empty());
  StragglerWatch tiny(1.5, {"a", "b", "c"});
  for (int step = 0; step < 6; ++step)  // 3x the median, but 2 ms over it
    EXPECT_TRUE(tiny.observe(times_of({0.001, 0.003, 0.001}), lines).empty());
  StragglerWatch off(0, {"a", "b", "c"});
  for (int step = 0; step < 6; ++step) EXPECT_TRUE(off.observe(times_of({0.1, 1.0, 0.1}), lines).empty());
  EXPECT_TRUE(lines.empty());
}

TEST(HangJudge, ARankIsHungWithoutProgressOutsideCollectivesOrWithoutHeartbeat) {
  HangJudge j(2.0);
  Beat b{1, 10, false, 3, "forward"};
  EXPECT_EQ(j.observe(1, b, 0.0), "");
  EXPECT_EQ(j.observe(1, b, 1.9), "");
  ++b.published;
  const std::string why = j.observe(1, b, 2.1);
  EXPECT_NE(why.find("no progress for 2.1 s outside any collective"), std::string::npos) << why;

  HangJudge waiting(2.0);
  Beat w{1, 10, true, 3, "gradient sync"};
  for (double t = 0; t < 10; t += 0.5) {
    ++w.published;
    EXPECT_EQ(waiting.observe(1, w, t), "") << "inside a collective, waiting for a peer: not hung (t = " << t << ")";
  }
  const std::string frozen = waiting.observe(1, w, 11.6);  // the file stopped changing after t = 9.5
  EXPECT_NE(frozen.find("not been published for 2.1 s"), std::string::npos) << frozen;

  HangJudge moving(2.0);
  Beat m{1, 10, false, 3, "forward"};
  for (double t = 0; t < 10; t += 0.5) {
    ++m.published, ++m.progress;
    EXPECT_EQ(moving.observe(1, m, t), "");
  }
  EXPECT_EQ(moving.observe(1, std::nullopt, 30.0), "") << "a rank that left is not judged";
  EXPECT_EQ(moving.observe(1, m, 31.0), "") << "seen again: its clocks start over";
}

// A two-rank world whose rank 1 stops making progress outside collectives:
// rank 0's heartbeat names it (rank, host, step, phase) after the timeout.
TEST(Heartbeat, NamesAHungRankWithItsStepAndPhase) {
  const fs::path dir = meshtrain::testing::fresh_test_dir("mt_heartbeat_");
  activity::RankActivity records[2];
  std::atomic<bool> named{false};
  std::string message;
  double after_s = 0;
  comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
    activity::RankActivity& mine = records[ctx.rank];
    const activity::Bind bind(&mine);
    const std::vector<std::string> hosts = gather_hosts(*ctx.world);
    HeartbeatOptions o;
    o.timeout_s = 0.3;
    o.collective_timeout_s = 60;
    o.dir = (dir / ".meshtrain-heartbeat").string();
    const auto t0 = std::chrono::steady_clock::now();
    o.on_hang = [&, t0](const std::string& m) {
      if (ctx.rank != 0) return;
      message = m;
      after_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      named = true;
    };
    Heartbeat hb(*ctx.world, mine, hosts, o);
    activity::set_step(4);
    if (ctx.rank == 1) {
      activity::mark("backward");  // then stuck outside any collective
      while (!named && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else {
      // Progress for a while, then wait for rank 1 inside a collective.
      for (int i = 0; i < 20; ++i) activity::mark("forward"), std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const activity::InCollective waiting;
      while (!named && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ctx.world->barrier();
  });
  ASSERT_TRUE(named) << "rank 1 was not named within 10 s";
  EXPECT_NE(message.find("heartbeat: rank 1 (host "), std::string::npos) << message;
  EXPECT_NE(message.find("is hung: no progress for"), std::string::npos) << message;
  EXPECT_NE(message.find("last at step 4, backward"), std::string::npos) << message;
  EXPECT_NE(message.find("comm.timeout_s = 60"), std::string::npos) << message;
  EXPECT_LT(after_s, 2.0) << "named about a timeout (0.3 s) after its last progress";
  EXPECT_FALSE(fs::exists(dir / ".meshtrain-heartbeat")) << "the files go with the heartbeats";
  fs::remove_all(dir);
}

TEST(StragglerConfig, KeysAreValidatedWithTheRule) {
  const std::string base = "[data]\npath = \"runs/data\"\n";
  using meshtrain::testing::config_error;
  EXPECT_EQ(config_error(base, {"comm.straggler_factor=0"}), "");
  EXPECT_EQ(config_error(base, {"comm.straggler_factor=2.5"}), "");
  const std::string low = config_error(base, {"comm.straggler_factor=0.8"});
  EXPECT_NE(low.find("comm.straggler_factor = 0.8: expected 0 (off) or a factor > 1"), std::string::npos) << low;
  EXPECT_NE(config_error(base, {"comm.straggler_factor=1"}).find("comm.straggler_factor"), std::string::npos);
  EXPECT_NE(config_error(base, {"comm.straggler_factor=nan"}).find("comm.straggler_factor"), std::string::npos);

  const TrainConfig defaults = parse_config(base);
  EXPECT_DOUBLE_EQ(defaults.comm.heartbeat_s(), 60) << "a fifth of the default comm.timeout_s = 300";
  EXPECT_DOUBLE_EQ(parse_config(base, {"comm.timeout_s=30"}).comm.heartbeat_s(), 6);
  EXPECT_EQ(config_error(base, {"comm.heartbeat_timeout_s=0"}), "") << "off";
  EXPECT_EQ(config_error(base, {"comm.heartbeat_timeout_s=299"}), "");
  const std::string above = config_error(base, {"comm.timeout_s=30", "comm.heartbeat_timeout_s=30"});
  EXPECT_NE(above.find("comm.heartbeat_timeout_s = 30 is not below comm.timeout_s = 30"), std::string::npos) << above;
  EXPECT_NE(above.find("comm.heartbeat_timeout_s = 0 to turn heartbeats off"), std::string::npos) << above;
  const std::string negative = config_error(base, {"comm.heartbeat_timeout_s=-2"});
  EXPECT_NE(negative.find("comm.heartbeat_timeout_s = -2"), std::string::npos) << negative;
  const std::string bad = config_error(base, {"comm.heartbeat_timeout_s=-0.5"});
  EXPECT_NE(bad.find("expected seconds (below comm.timeout_s), 0 (off) or -1"), std::string::npos) << bad;
}

// Rank 1 sleeps 20 ms at every forward fault point: from the third step on
// metrics.jsonl names it (rank, host, ratio), and every record holds both
// ranks' times with rank 1 the slowest.
TEST(StragglerRun, AnInjectedDelayOnOneRankIsNamedInMetrics) {
  const fs::path dir = meshtrain::testing::fresh_test_dir("mt_straggler_run_");
  TrainConfig cfg = meshtrain::testing::tiny_train_config();
  cfg.parallel.dp = 2;
  cfg.training.steps = 5;
  cfg.metrics.run_dir = dir.string();
  cfg.metrics.jsonl = "metrics.jsonl";
  const data::TokenDataset ds = meshtrain::testing::varied_documents(64, 3);
  fault::arm(fault::parse_rule("forward@1:delay=0.02"));
  std::FILE* console = std::tmpfile();
  meshtrain::testing::with_trainers(cfg, ds, std::nullopt, [&](Trainer& t) {
    run_training(t, t.context().rank == 0 ? console : nullptr);
  });
  fault::disarm();
  std::rewind(console);
  std::string log;
  for (int c; (c = std::fgetc(console)) != EOF;) log += char(c);
  std::fclose(console);
  EXPECT_NE(log.find("warning: rank 1 (host "), std::string::npos) << log;
  std::ifstream in(dir / "metrics.jsonl");
  int steps = 0, named = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    ++steps;
    ASSERT_TRUE(j.contains("ranks")) << line;
    EXPECT_EQ(j["ranks"]["step_s"].size(), 2u);
    EXPECT_EQ(j["ranks"]["slowest"], 1) << line;
    const double c0 = j["ranks"]["compute_s"][0], c1 = j["ranks"]["compute_s"][1];
    EXPECT_GT(c1, c0 + 0.02) << "rank 1 computes longer (the delay): " << line;
    if (j["step"].get<int>() < 3) {
      EXPECT_FALSE(j.contains("straggler")) << line;
      continue;
    }
    ASSERT_TRUE(j.contains("straggler")) << line;
    ++named;
    EXPECT_EQ(j["straggler"][0]["rank"], 1);
    EXPECT_GE(j["straggler"][0]["ratio"].get<double>(), 1.5);
    EXPECT_FALSE(j["straggler"][0]["host"].get<std::string>().empty());
  }
  EXPECT_EQ(steps, 5);
  EXPECT_EQ(named, 3);
  fs::remove_all(dir);
}

}  // namespace
