// Checkpoints across a context-parallel change (SPEC S9): a state trained
// and saved at cp = 2 x dp = 2 (ZeRO 1) records cp in its layout, loads at
// cp = 1 and at cp = 4 under ZeRO 3, and saved again it is the same
// checkpoint bit for bit; training continues from it within the
// equivalence tolerance of continuing at cp = 2.
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
  cfg = train::with_layout(cfg, l);
  std::vector<double> params;
  std::mutex mu;
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    act(t);
    auto p = parallel::gather_global_values(t.engine(), t.context().group({"pp", "tp"}), false);
    std::lock_guard<std::mutex> lock(mu);
    if (t.context().rank == 0) params = std::move(p);
  });
  return params;
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
    const auto loaded = on_layout(cfg, layout, ds, [&](train::Trainer& t) {
      const std::string claim = t.restore(checkpoint::CheckpointReader::open(dir("cp2")));
      EXPECT_EQ(claim.rfind("numerically close", 0), 0u) << claim << " (another cp sums in another order)";
      EXPECT_EQ(t.steps_done(), 2);
      t.save_checkpoint();
    });
    EXPECT_EQ(loaded, trained) << "the restored parameters are the saved ones";
    const auto diff = checkpoint::compare_checkpoints(saved, checkpoint::CheckpointReader::open(dir(name)));
    EXPECT_TRUE(diff.identical()) << diff.str();
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
