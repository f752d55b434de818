// Checkpoints across a context-parallel change (docs/math.md, "Rule:
// restore claims"): a state trained and saved at cp = 2 x dp = 2 (ZeRO 1)
// records cp in its layout, loads at cp = 1 and at cp = 4 under ZeRO 3, and
// saved again it is the same checkpoint bit for bit; training continues
// from it within the equivalence tolerance of continuing at cp = 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "meshtrain/checkpoint/compare.h"
#include "meshtrain/parallel/global_values.h"
#include "meshtrain/train/equivalence.h"
#include "support/numeric.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

namespace {

// The layout's parallel settings ("cp=2,dp=2,zero=1", equivalence.h) on cfg,
// the same global window on every layout.
std::vector<double> on_layout(train::TrainConfig cfg, const std::string& layout, const data::TokenDataset& ds,
                              const std::function<void(train::Trainer&)>& act) {
  const train::Layout l = train::parse_layout(layout);
  cfg.training.grad_accum = 2 / l.dp;
  return params_after(train::with_layout(cfg, l), ds, act);
}

}  // namespace

TEST(ContextParallelCheckpoint, SavedAtCpTwoLoadsAtOneAndFourAndSavesTheSameCheckpoint) {
  auto cfg = context_parallel_config();
  const auto ds = mixed_length_documents(60);
  const fs::path root = fresh_dir("cp-ckpt");
  auto dir = [&](const std::string& run) { return (root / run / "checkpoints").string(); };

  cfg.metrics.run_dir = (root / "cp2").string();
  const auto trained = on_layout(cfg, "cp=2,dp=2,zero=1", ds, [](train::Trainer& t) {
    t.step();
    t.step();
    t.save_checkpoint();
  });
  const auto saved = checkpoint::CheckpointReader::open(dir("cp2"));
  EXPECT_EQ(saved.metadata().at("layout").at("cp"), 2);

  for (const auto& [name, layout] : std::vector<std::pair<std::string, std::string>>{{"cp1", "cp=1"},
                                                                                     {"cp4_zero3", "cp=4,zero=3"}}) {
    SCOPED_TRACE(name);
    cfg.metrics.run_dir = (root / name).string();
    // Another cp sums in another order.
    expect_resaved_identically([&, l = layout](const auto& act) { return on_layout(cfg, l, ds, act); }, dir("cp2"),
                               dir(name), "numerically close", 2, trained, saved);
  }

  auto continued = [&](const std::string& l, const std::string& run) {
    cfg.metrics.run_dir = (root / run).string();
    return on_layout(cfg, l, ds, [&](train::Trainer& t) {
      t.restore(checkpoint::CheckpointReader::open(dir("cp2")));
      EXPECT_FALSE(t.step().skipped);
    });
  };
  const auto at2 = continued("cp=2,dp=2,zero=1", "c2"), at1 = continued("cp=1", "c1");
  EXPECT_LT(rel_to_max(at1, at2), 1e-5);
  EXPECT_NE(at2, trained);
}
