// Checkpoint pieces come from placements: each rank writes the N-d boxes of
// the global tensors its placement gives it, and a reader assembles any
// other layout's boxes. A tensor-parallel split (vocabulary rows, heads,
// hidden columns) saved at tp = 2 loads at tp = 1 with ZeRO-3 over dp = 2,
// and back, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

namespace {

// Every held parameter's local values on every rank, keyed by (name, tp rank).
using Values = std::map<std::pair<std::string, int>, std::vector<double>>;

Values local_values(const train::TrainConfig& cfg, const comm::MeshShape& mesh, const data::TokenDataset& ds,
                    const std::function<void(train::Trainer&)>& act) {
  Values out;
  std::mutex mu;
  comm::LaunchOptions o;
  o.world_size = mesh.world_size();
  o.mesh = mesh;
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    train::TrainConfig c = cfg;
    c.parallel.dp = mesh.dp;
    c.parallel.tp = mesh.tp;
    train::Trainer t(c, ctx, ds, std::nullopt);
    act(t);
    // Gather each unit over dp (ZeRO-3 shards), then read every parameter.
    const auto& plan = t.engine().plan();
    std::map<std::pair<std::string, int>, std::vector<double>> mine;
    for (int u = 0; u < plan.num_units(); ++u) {
      const std::vector<double> unit = t.engine().gather_unit(u, false);
      for (int i : plan.spec().units[size_t(u)].params) {
        const auto& p = plan.spec().params[size_t(i)];
        mine[{p.name, t.layout().coord(comm::Axis::Tp)}] =
            std::vector<double>(unit.begin() + p.unit_offset, unit.begin() + p.unit_offset + p.numel());
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [k, v] : mine) out[k] = v;
  });
  return out;
}

}  // namespace

TEST(PlacementCheckpoint, TensorParallelBoxesReshardBothWays) {
  auto cfg = tiny_train_config();
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;
  cfg.model.head_dim = 4;
  cfg.model.ffn_hidden = 30;  // 15 + 15; vocab 259 = 130 + 129
  const auto ds = varied_documents(32, 3);
  const fs::path root = fs::temp_directory_path() / ("mt-placement-" + std::to_string(::getpid()));
  fs::remove_all(root);
  comm::MeshShape one, tp2, dp2;
  tp2.tp = 2;
  dp2.dp = 2;

  // A trained state at tp = 1 (one step, so moments are not zero), saved.
  cfg.metrics.run_dir = (root / "a").string();
  const Values trained = local_values(cfg, one, ds, [](train::Trainer& t) {
    t.step();
    t.save_checkpoint();
  });
  // Loaded at tp = 2: each rank holds exactly its slices of the tp = 1 tensors.
  const Values split = local_values(cfg, tp2, ds, [&](train::Trainer& t) {
    t.restore(checkpoint::CheckpointReader::open((root / "a" / "checkpoints").string()));
    EXPECT_EQ(t.steps_done(), 1);
  });
  const auto spec = model::build_model_spec([&] {
    auto m = cfg.model;
    m.finalize();
    return m;
  }());
  for (const auto& p : spec.params) {
    const auto& whole = trained.at({p.name, 0});
    std::vector<double> joined(size_t(p.numel()));
    std::vector<int> hits(size_t(p.numel()), 0);
    for (int r = 0; r < 2; ++r) {
      model::ModelPartition part;
      part.tp_size = 2;
      part.tp_rank = r;
      auto finalized = cfg.model;
      finalized.finalize();
      const auto local = model::localize(spec, finalized, part);
      const auto& lp = local.find(p.name);
      const auto& vals = split.at({p.name, r});
      for (int64_t e = 0; e < lp.numel(); ++e) {
        joined[size_t(lp.global_flat(e))] = vals[size_t(e)];
        hits[size_t(lp.global_flat(e))]++;
      }
    }
    for (int h : hits) ASSERT_GE(h, 1) << p.name;
    EXPECT_EQ(joined, whole) << p.name;
  }
  // Saved from tp = 2 and loaded at dp = 2 with ZeRO-3: the original bits.
  cfg.metrics.run_dir = (root / "b").string();
  local_values(cfg, tp2, ds, [&](train::Trainer& t) {
    t.restore(checkpoint::CheckpointReader::open((root / "a" / "checkpoints").string()));
    t.save_checkpoint();
  });
  auto zero3 = cfg;
  zero3.parallel.zero_stage = 3;
  const Values back = local_values(zero3, dp2, ds, [&](train::Trainer& t) {
    t.restore(checkpoint::CheckpointReader::open((root / "b" / "checkpoints").string()));
  });
  EXPECT_EQ(back, trained);
  // The manifest of the tp = 2 save records the mesh it was written by.
  const auto reader = checkpoint::CheckpointReader::open((root / "b" / "checkpoints").string());
  EXPECT_EQ(reader.metadata().at("layout").at("tp"), 2);
  EXPECT_GT(reader.tensor("model.embed_tokens.weight").pieces.size(), 1u) << "vocabulary rows from both tp ranks";
  fs::remove_all(root);
}
