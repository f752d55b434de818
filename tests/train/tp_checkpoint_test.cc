// Checkpoints across a tensor-parallel change (docs/math.md, "Rule: restore
// claims"): a state trained and saved at tp = 2 with sequence parallelism
// loads at tp = 1 and tp = 4 under any dp / ZeRO stage, and saved again it
// is the same checkpoint bit for bit (parameters and both Adam moments, step
// and data position); the safetensors export of the tp-sharded checkpoint is
// the single rank's export byte for byte; training continues from it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "meshtrain/checkpoint/compare.h"
#include "meshtrain/checkpoint/export_import.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/parallel/global_values.h"
#include "support/numeric.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

namespace {

struct Layout {
  int tp, dp, zero;
  bool sp;
};

// Runs act on every rank of the layout; returns rank 0's global parameters after it.
std::vector<double> with_layout(train::TrainConfig cfg, const Layout& l, const data::TokenDataset& ds,
                                const std::function<void(train::Trainer&)>& act) {
  cfg.parallel.tp = l.tp;
  cfg.parallel.dp = l.dp;
  cfg.parallel.zero_stage = l.zero;
  cfg.parallel.sequence_parallel = l.sp;
  cfg.training.micro_batch = 4 / l.dp;  // the same global batch on every layout
  cfg.validate();
  return params_after(cfg, ds, act);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(TensorParallelCheckpoint, SavedAtTwoResumedAtOneAndFourBitwise) {
  auto cfg = tiny_train_config();
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;  // split at tp 2, shared by 2 ranks at tp 4
  cfg.model.head_dim = 4;
  cfg.model.ffn_hidden = 30;  // 15 + 15 at tp 2, 8 + 8 + 7 + 7 at tp 4; vocab 259 = 130 + 129 = 65 x 3 + 64
  cfg.training.threads = 1;
  const auto ds = varied_documents(48, 7);
  const fs::path root = fs::temp_directory_path() / ("mt-tp-ckpt-" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto dir = [&](const std::string& run) { return (root / run / "checkpoints").string(); };

  // Two steps at tp = 2 with sequence parallelism, saved.
  cfg.metrics.run_dir = (root / "tp2").string();
  const std::vector<double> trained = with_layout(cfg, {2, 1, 0, true}, ds, [](train::Trainer& t) {
    t.step();
    t.step();
    t.save_checkpoint();
  });
  const auto saved = checkpoint::CheckpointReader::open(dir("tp2"));
  EXPECT_EQ(saved.metadata().at("layout").at("tp"), 2);

  // Loaded by other layouts and saved again: the same checkpoint, bit for bit.
  const std::vector<std::pair<std::string, Layout>> targets = {
      {"tp1_dp2_zero3", {1, 2, 3, false}}, {"tp4_zero1", {4, 1, 1, true}}, {"tp1", {1, 1, 0, false}},
      {"tp2_dp2_zero2", {2, 2, 2, false}}};
  for (const auto& [name, layout] : targets) {
    SCOPED_TRACE(name);
    cfg.metrics.run_dir = (root / name).string();
    // Another tp or dp degree (or SP setting) sums in another order.
    const auto diff = expect_resaved_identically(
        [&, l = layout](const auto& act) { return with_layout(cfg, l, ds, act); }, dir("tp2"), dir(name),
        "numerically close", 2, trained, saved);
    EXPECT_GT(diff.tensors_compared, 3 * 20) << "parameters and both moments";
  }

  // The safetensors export of the tp-sharded checkpoint is the single rank's.
  // (each into its own directory: an export writes config.json beside the file)
  const std::string a = (root / "export-tp2" / "model.safetensors").string(),
                    b = (root / "export-tp1" / "model.safetensors").string();
  checkpoint::export_safetensors(saved, a);
  checkpoint::export_safetensors(checkpoint::CheckpointReader::open(dir("tp1")), b);
  EXPECT_FALSE(file_bytes(a).empty());
  EXPECT_EQ(file_bytes(a), file_bytes(b));

  // Training continues from it at tp = 4: the same step as at tp = 2 within
  // the equivalence tolerance (the reduction order differs).
  auto continued = [&](const Layout& l, const std::string& run) {
    cfg.metrics.run_dir = (root / run).string();
    return with_layout(cfg, l, ds, [&](train::Trainer& t) {
      t.restore(checkpoint::CheckpointReader::open(dir("tp2")));
      EXPECT_FALSE(t.step().skipped);
      EXPECT_EQ(t.steps_done(), 3);
    });
  };
  const auto at2 = continued({2, 1, 0, true}, "c2"), at4 = continued({4, 1, 1, true}, "c4");
  cfg.metrics.run_dir = (root / "same").string();
  with_layout(cfg, {2, 1, 3, true}, ds, [&](train::Trainer& t) {
    const std::string claim = t.restore(checkpoint::CheckpointReader::open(dir("tp2")));
    EXPECT_EQ(claim.rfind("bitwise replay", 0), 0u) << claim << " (only the ZeRO stage changed)";
  });
  EXPECT_LT(rel_to_max(at4, at2), 1e-4);
  EXPECT_NE(at2, trained);
  fs::remove_all(root);
}
