// Hierarchical data-parallel collectives in training (train/hierarchy.h):
// dp = 4 on two "nodes" of two ranks (MESHTRAIN_HOST_OF_RANK, threads
// backend). In reproducible mode the run with comm.hierarchical = on is
// bit for bit the flat run under every ZeRO stage; without it, within the
// rounding of a reordered sum. The hierarchical runs do send over the
// inter-node groups (so the equality is not the flat path twice).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <mutex>

#include "meshtrain/comm/hierarchical_group.h"
#include "plan/test_machine.h"
#include "support/scoped_env.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

struct TrainedRun {
  std::vector<double> losses, params;
  uint64_t link_calls = 0;  // ops of the data group's inter-node sub-group, over all ranks
  std::string note;         // rank 0's hierarchy note
};

TrainedRun run(train::TrainConfig cfg, const std::string& mode, const char* hosts = "node0,node0,node1,node1") {
  const ScopedEnv env("MESHTRAIN_HOST_OF_RANK", hosts);
  cfg.comm.hierarchical = mode;
  TrainedRun out;
  std::mutex mu;
  with_trainers(cfg, varied_documents(96, 5), std::nullopt, [&](train::Trainer& t) {
    std::vector<double> losses;
    while (t.steps_done() < 3) losses.push_back(t.step().loss);
    const std::vector<double> params = gathered(t);
    uint64_t calls = 0;
    if (auto* h = comm::as_hierarchical(t.training_step().data_group())) calls = h->inter().stats().total().calls;
    std::lock_guard<std::mutex> lock(mu);
    out.link_calls += calls;
    if (t.context().rank == 0) out.losses = losses, out.params = params, out.note = t.training_step().hierarchy_note();
  });
  return out;
}

train::TrainConfig dp4(int stage, bool reproducible) {
  auto cfg = tiny_train_config();
  cfg.parallel.dp = 4;
  cfg.parallel.zero_stage = stage;
  cfg.training.reproducible = reproducible;
  cfg.training.micro_batch = 2;
  cfg.training.grad_accum = 2;
  cfg.training.threads = 1;
  return cfg;
}

}  // namespace

TEST(HierarchicalTraining, ReproducibleModeIsBitwiseTheFlatRunUnderEveryStage) {
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "zero_stage " << stage);
    const TrainedRun flat = run(dp4(stage, true), "off"), hier = run(dp4(stage, true), "on");
    EXPECT_EQ(flat.link_calls, 0u);
    EXPECT_GT(hier.link_calls, 0u) << "nothing went over the inter-node groups";
    EXPECT_EQ(hier.losses, flat.losses);
    EXPECT_EQ(hier.params, flat.params);
    EXPECT_NE(hier.note.find("data-parallel group 'dp': hierarchical (2 nodes x 2 ranks)"), std::string::npos)
        << hier.note;
    EXPECT_NE(flat.note.find("flat (2 nodes x 2 ranks) (comm.hierarchical = off)"), std::string::npos) << flat.note;
  }
}

TEST(HierarchicalTraining, OtherwiseWithinTheRoundingOfAReorderedSum) {
  // (x0 + x1) + (x2 + x3) against ((x0 + x1) + x2) + x3 per element, then
  // three Adam steps: parameters within 1e-5 relative (f32).
  for (int stage : {0, 3}) {
    SCOPED_TRACE(::testing::Message() << "zero_stage " << stage);
    const TrainedRun flat = run(dp4(stage, false), "off"), hier = run(dp4(stage, false), "on");
    EXPECT_GT(hier.link_calls, 0u);
    ASSERT_EQ(hier.params.size(), flat.params.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < flat.params.size(); ++i) {
      worst = std::max(worst, std::fabs(hier.params[i] - flat.params[i]));
      scale = std::max(scale, std::fabs(flat.params[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale);
    for (size_t s = 0; s < flat.losses.size(); ++s) EXPECT_NEAR(hier.losses[s], flat.losses[s], 1e-5 * flat.losses[s]);
  }
}

TEST(HierarchicalTraining, NodesHoldingDifferentCountsStayFlatAndSaySo) {
  const TrainedRun r = run(dp4(0, true), "on", "node0,node0,node0,node1");
  EXPECT_EQ(r.link_calls, 0u);
  EXPECT_NE(r.note.find("data-parallel group 'dp': flat: its nodes hold different numbers of its members (node0 3, "
                        "node1 1)"),
            std::string::npos)
      << r.note;
  EXPECT_EQ(run(dp4(0, true), "on", "node0,node0,node0,node0").note, "") << "one node: nothing to say";
}

TEST(HierarchicalTraining, AutoTakesThePlannersChoiceOnTheMachineProfile) {
  // Without a profile: flat. With one: each collective in the form (M.20)
  // vs (M.70) predicts faster: hierarchical behind a slow link, flat where
  // shared memory is the slower of the two (in latency too, so every size).
  auto profile = [](double intra_gbps, double intra_alpha_us) {
    const std::string name = detail::concat("intra ", intra_gbps, " GB/s");
    const std::string path = ::testing::TempDir() + "/hier-" + std::to_string(int(intra_gbps * 10)) + ".toml";
    std::ofstream(path) << test_machine_toml(name, 2, true, {.intra_alpha_us = intra_alpha_us, .intra_gbps = intra_gbps,
                                                            .inter_alpha_us = 10, .inter_gbps = 1});
    return path;
  };
  auto cfg = dp4(0, true);
  const TrainedRun none = run(cfg, "auto");
  EXPECT_EQ(none.link_calls, 0u);
  EXPECT_NE(none.note.find("flat (2 nodes x 2 ranks) (comm.hierarchical = auto without a machine profile"),
            std::string::npos)
      << none.note;
  cfg.comm.hardware = profile(100, 1);
  const TrainedRun fast_inside = run(cfg, "auto");
  EXPECT_GT(fast_inside.link_calls, 0u);
  EXPECT_NE(fast_inside.note.find("per collective, the form predicted faster on intra 100 GB/s (2 nodes x 2 ranks)"),
            std::string::npos)
      << fast_inside.note;
  EXPECT_EQ(fast_inside.params, none.params) << "reproducible mode: the same bits either way";
  cfg.comm.hardware = profile(0.1, 100);
  EXPECT_EQ(run(cfg, "auto").link_calls, 0u) << "shared memory slower than the link: flat";
}

TEST(HierarchicalTraining, BadSettingsAreRefusedNamingTheKey) {
  auto refusal = [](const std::vector<std::string>& sets) {
    try {
      train::parse_config("[data]\npath = \"runs/data\"\n", sets);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal({"comm.hierarchical=sometimes"}).find("comm.hierarchical = \"sometimes\": expected \"auto\""),
            std::string::npos);
  EXPECT_NE(refusal({"comm.hierarchical=on", "comm.hardware=configs/hardware/h100-sxm.toml"})
                .find("comm.hardware = \"configs/hardware/h100-sxm.toml\" has no effect under comm.hierarchical = \"on\""),
            std::string::npos);
  EXPECT_EQ(refusal({"comm.hierarchical=off"}), "");
}
