// Checkpoints across an expert-parallel change (docs/math.md, "Rule: restore
// claims"): a MoE state trained and saved at dp = 2, ep = 2 loads at ep = 1 and
// ep = 4 (any dp / ZeRO stage) with the same parameters bit for bit, each expert
// tensor is stored once, saved again it is the same checkpoint (parameters, both
// Adam moments), the claim names the reduction order change, and training
// continues from it within the equivalence tolerance. In reproducible mode the
// continuation at ep = 1 and ep = 4 is bit for bit the ep = 2 run's.
#include <gtest/gtest.h>

#include "meshtrain/checkpoint/compare.h"
#include "support/numeric.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

namespace {

struct Layout {
  int dp, ep, zero;
};

std::vector<double> with_layout(train::TrainConfig cfg, const Layout& l, const data::TokenDataset& ds,
                                const std::function<void(train::Trainer&)>& act) {
  cfg.parallel.dp = l.dp;
  cfg.parallel.ep = l.ep;
  cfg.parallel.zero_stage = l.zero;
  cfg.training.micro_batch = 4 / l.dp;  // the same global batch on every layout
  cfg.validate();
  return params_after(cfg, ds, act);
}

}  // namespace

TEST(MoeCheckpoint, SavedAtEpTwoResumedAtOneAndFour) {
  auto cfg = tiny_moe_config(2, false, 1.0);
  const auto ds = varied_documents(48, 7);
  const fs::path root = fresh_dir("mt-moe-ckpt");
  auto dir = [&](const std::string& run) { return (root / run / "checkpoints").string(); };

  cfg.metrics.run_dir = (root / "ep2").string();
  const std::vector<double> trained = with_layout(cfg, {2, 2, 0}, ds, [](train::Trainer& t) {
    t.step();
    t.step();
    t.save_checkpoint();
  });
  const auto saved = checkpoint::CheckpointReader::open(dir("ep2"));
  EXPECT_EQ(saved.metadata().at("layout").at("ep"), 2);
  // Each expert tensor once, whole (every expert of both MoE blocks).
  int expert_tensors = 0;
  for (const auto& name : saved.names())
    if (name.find(".mlp.experts.") != std::string::npos) ++expert_tensors;
  EXPECT_EQ(expert_tensors, 2 * 4 * 3 * 3) << "2 blocks x 4 experts x 3 projections x (value, m, v)";

  for (const auto& [name, layout] : std::vector<std::pair<std::string, Layout>>{
           {"ep1", {1, 1, 0}}, {"ep4_zero3", {4, 4, 3}}, {"dp4_ep2_zero1", {4, 2, 1}}}) {
    SCOPED_TRACE(name);
    cfg.metrics.run_dir = (root / name).string();
    expect_resaved_identically([&, l = layout](const auto& act) { return with_layout(cfg, l, ds, act); }, dir("ep2"),
                               dir(name), "numerically close", 2, trained, saved);
  }

  auto continued = [&](const Layout& l, const std::string& run) {
    cfg.metrics.run_dir = (root / run).string();
    return with_layout(cfg, l, ds, [&](train::Trainer& t) {
      t.restore(checkpoint::CheckpointReader::open(dir("ep2")));
      EXPECT_FALSE(t.step().skipped);
    });
  };
  const auto at2 = continued({2, 2, 0}, "c2"), at1 = continued({1, 1, 0}, "c1"), at4 = continued({4, 4, 0}, "c4");
  EXPECT_LT(rel_to_max(at1, at2), 1e-4);
  EXPECT_LT(rel_to_max(at4, at2), 1e-4);
  EXPECT_NE(at2, trained);
  cfg.metrics.run_dir = (root / "same").string();
  with_layout(cfg, {2, 2, 3}, ds, [&](train::Trainer& t) {
    const std::string claim = t.restore(checkpoint::CheckpointReader::open(dir("ep2")));
    EXPECT_EQ(claim.rfind("bitwise replay", 0), 0u) << claim << " (only the ZeRO stage changed)";
  });
  fs::remove_all(root);
}

TEST(MoeCheckpoint, ReproducibleModeResumesAtAnotherEpBitForBit) {
  auto cfg = tiny_moe_config(2, true, 1.0);
  cfg.training.reproducible = true;
  cfg.training.micro_batch = 1;
  const auto ds = varied_documents(48, 7);
  const fs::path root = fresh_dir("mt-moe-ckpt-repro");
  auto run = [&](const std::string& name, int dp, int ep, int zero, bool resume, int steps) {
    auto c = cfg;
    c.parallel.dp = dp;
    c.parallel.ep = ep;
    c.parallel.zero_stage = zero;
    c.training.grad_accum = 4 / dp;  // 4 micro-batches of one row per update on every layout
    c.metrics.run_dir = (root / name).string();
    c.validate();
    return params_after(c, ds, [&](train::Trainer& t) {
      if (resume) {
        const std::string claim = t.restore(checkpoint::CheckpointReader::open((root / "ep2" / "checkpoints").string()));
        EXPECT_EQ(claim.rfind("bitwise replay", 0), 0u) << claim;
      }
      for (int s = 0; s < steps; ++s) EXPECT_FALSE(t.step().skipped);
      if (!resume) t.save_checkpoint();
    });
  };
  run("ep2", 2, 2, 0, false, 2);
  const auto at2 = run("c2", 2, 2, 0, true, 2);
  EXPECT_EQ(run("c1", 2, 1, 0, true, 2), at2) << "ep 2 -> 1";
  EXPECT_EQ(run("c4", 4, 4, 3, true, 2), at2) << "ep 2 -> 4 (dp 4, ZeRO-3)";
  EXPECT_EQ(run("one", 1, 1, 0, true, 2), at2) << "ep 2 -> one rank";
  fs::remove_all(root);
}
