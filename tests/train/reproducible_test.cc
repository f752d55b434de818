// Reproducible mode (training.reproducible): the same bits under every
// dp x G split of the same global window — parameters, Adam moments and
// losses — under every ZeRO stage, packed and padded batches, and across a
// checkpoint written at one split and resumed at another.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "meshtrain/checkpoint/reader.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

namespace {

struct State {
  std::vector<double> losses, params, m, v;
  bool operator==(const State&) const = default;
};

train::TrainConfig split(int R, int G, int stage, const std::string& mode, bool reproducible = true) {
  auto cfg = tiny_train_config();
  cfg.training.reproducible = reproducible;
  cfg.optimizer.lr = 1e-3;
  cfg.data.mode = mode;
  cfg.parallel.dp = R;
  cfg.parallel.zero_stage = stage;
  cfg.training.grad_accum = G;
  cfg.training.micro_batch = 1;
  cfg.training.steps = 5;
  return cfg;
}

// Adam moments gathered over dp, in unit order.
std::vector<double> moments(train::Trainer& t, int which) {
  std::vector<double> out;
  auto& e = t.engine();
  const auto& plan = e.plan();
  for (int u = 0; u < plan.num_units(); ++u) {
    const Tensor m = e.moment(which, u);
    std::vector<float> full(size_t(plan.unit(u).padded));
    if (plan.shards_optimizer())
      t.context().group("dp").all_gather(m.raw(), full.data(), full.size(), DType::F32);
    else
      std::copy(m.data<float>(), m.data<float>() + full.size(), full.begin());
    out.insert(out.end(), full.begin(), full.begin() + plan.unit(u).numel);
  }
  return out;
}

State train_steps(const train::TrainConfig& cfg, int steps, const std::function<void(train::Trainer&)>& setup = {}) {
  State out;
  std::mutex mu;
  with_trainers(cfg, varied_documents(96, 3), std::nullopt, [&](train::Trainer& t) {
    if (setup) setup(t);
    State s;
    while (t.steps_done() < steps) s.losses.push_back(t.step().loss);
    s.params = gathered(t);
    s.m = moments(t, 0);
    s.v = moments(t, 1);
    std::lock_guard<std::mutex> lock(mu);
    if (t.context().rank == 0) out = s;
  });
  return out;
}

}  // namespace

TEST(Reproducible, EverySplitOfTheWindowGivesTheSameBits) {
  for (const std::string mode : {"padded", "packed"}) {
    const State ref = train_steps(split(1, 4, 0, mode), 5);
    for (auto [R, G] : {std::pair{2, 2}, std::pair{4, 1}})
      for (int stage : {0, 1, 2, 3}) {
        SCOPED_TRACE(::testing::Message() << mode << " dp=" << R << " G=" << G << " zero=" << stage);
        const State s = train_steps(split(R, G, stage, mode), 5);
        EXPECT_EQ(s.losses, ref.losses);
        EXPECT_EQ(s.params, ref.params);
        EXPECT_EQ(s.m, ref.m);
        EXPECT_EQ(s.v, ref.v);
      }
  }
}

TEST(Reproducible, WithoutTheModeTheSplitsDiffer) {
  // The reason the mode exists: rank-order reductions and running sums over
  // micro-batches depend on the split.
  const State a = train_steps(split(1, 4, 0, "padded", false), 3), b = train_steps(split(2, 2, 0, "padded", false), 3);
  EXPECT_NE(a.params, b.params);
}

TEST(Reproducible, ACheckpointMovesBetweenSplitsBitForBit) {
  const fs::path dir = fs::path(::testing::TempDir()) / "mt_reproducible_resume";
  fs::remove_all(dir);
  const State straight = train_steps(split(1, 4, 0, "padded"), 5);
  auto first = split(2, 2, 2, "padded");
  first.checkpoint.dir = dir.string();
  with_trainers(first, varied_documents(96, 3), std::nullopt, [&](train::Trainer& t) {
    for (int s = 0; s < 2; ++s) t.step();
    t.save_checkpoint();
  });
  auto second = split(4, 1, 3, "padded");
  second.checkpoint.dir = dir.string();
  std::string claim;
  const State resumed = train_steps(second, 5, [&](train::Trainer& t) {
    const std::string c = t.resume_or_init();
    if (t.context().rank == 0) claim = c;
  });
  EXPECT_NE(claim.find("bitwise replay"), std::string::npos) << claim;
  EXPECT_EQ(resumed.params, straight.params);
  EXPECT_EQ(resumed.m, straight.m);
  EXPECT_EQ(resumed.v, straight.v);
  fs::remove_all(dir);
}

TEST(Reproducible, SplitsThatAreNotAPowerOfTwoAreRejected) {
  try {
    train_steps(split(3, 2, 0, "padded"), 1);
    FAIL() << "dp 3 x G 2 cannot form one binary tree";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dp x grad_accum = 3 x 2 = 6 must be a power of two"), std::string::npos)
        << e.what();
  }
}
