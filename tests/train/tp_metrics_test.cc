// Covers src/meshtrain/train/tp_metrics.cc.
// The step metrics report what tensor parallelism moved: per block the
// ring bytes of the formula (G micro-batches of B x S tokens per step),
// the partial gradients summed over tp ranks, in the JSON record too; the
// copies those sums keep identical; evaluation under tp; the gradient norm
// counting each of those copies once.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "meshtrain/core/threading.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

TEST(TensorParallelMetrics, StepReportsBytesPerLayerAndGradientSums) {
  auto cfg = tiny_train_config();
  cfg.data.mode = "packed";  // every micro-batch B x seq_len tokens
  cfg.model.n_heads = 2;
  cfg.model.n_kv_heads = 2;
  cfg.training.grad_accum = 2;
  const auto ds = varied_documents(64, 9);
  const int t = 2;
  const int64_t d = cfg.model.d_model, L = cfg.model.n_layers;
  const int64_t tokens = cfg.training.grad_accum * cfg.training.micro_batch * cfg.data.seq_len;
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sp" : "no sp");
    cfg.parallel.tp = t;
    cfg.parallel.sequence_parallel = sp;
    comm::LaunchOptions o;
    o.mesh.tp = t;
    o.world_size = t;
    comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
      set_compute_threads(1);
      train::Trainer tr(cfg, ctx, ds, std::nullopt);
      const train::StepMetrics m = tr.step();
      using C = model::TpCollective;
      const int64_t per_layer = m.tp.layer_ring_bytes[size_t(C::AllReduce)] +
                                m.tp.layer_ring_bytes[size_t(C::AllGather)] +
                                m.tp.layer_ring_bytes[size_t(C::ReduceScatter)];
      EXPECT_EQ(per_layer, 8 * (t - 1) * tokens * d * 4 / t);
      EXPECT_EQ(m.tp.layer_message_bytes[size_t(sp ? C::AllGather : C::AllReduce)], 4 * tokens * d * 4);
      // Under SP the norm weights' partial gradients are summed over tp:
      // two per block and the final norm, d floats each (RoPE, no biases).
      EXPECT_EQ(m.tp.grad_sum_bytes, sp ? (2 * L + 1) * d * 4 : 0);
      const auto j = m.to_json();
      ASSERT_TRUE(j.contains("tp_comm")) << j.dump();
      EXPECT_EQ(j["tp_comm"]["grad_sum_bytes"], m.tp.grad_sum_bytes);
      EXPECT_GT(j["tp_comm"]["ring_bytes"]["all_reduce"].get<int64_t>(), 0) << "the loss's max and sums at least";
    });
  }
}

// Replicated weights under sequence parallelism (norms, row-parallel biases,
// learned positions) and KV heads shared by several ranks get partial
// gradients on each rank; after the engine sums them every copy's gradient
// and value is the same bits on every tp rank (per-rank layernorm
// gradients that differ are a known failure elsewhere).
TEST(TensorParallelMetrics, ReplicatedCopiesStayIdenticalAcrossTpRanks) {
  auto cfg = tiny_train_config();  // 2 heads, 1 KV head: shared by both ranks
  cfg.model.norm = model::NormKind::LayerNorm;
  cfg.model.positions = model::PositionKind::Learned;
  cfg.model.bias = true;
  cfg.parallel.tp = 2;
  cfg.parallel.sequence_parallel = true;
  const auto ds = varied_documents(64, 9);
  std::mutex mu;
  std::map<std::string, std::vector<std::vector<double>>> copies;  // name -> per rank: grads ++ values
  comm::LaunchOptions o;
  o.mesh.tp = 2;
  o.world_size = 2;
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    set_compute_threads(1);
    train::Trainer tr(cfg, ctx, ds, std::nullopt);
    tr.step();
    tr.step();
    const auto& spec = tr.layout().spec();
    for (int u = 0; u < int(spec.units.size()); ++u) {
      const auto g = tr.engine().gather_unit(u, true), v = tr.engine().gather_unit(u, false);
      for (int i : spec.units[size_t(u)].params) {
        const auto& p = spec.params[size_t(i)];
        if (p.tp.is_shard() && tr.layout().param(i).tp_replicas == 1) continue;  // a distinct piece per rank
        std::vector<double> both(g.begin() + p.unit_offset, g.begin() + p.unit_offset + p.numel());
        both.insert(both.end(), v.begin() + p.unit_offset, v.begin() + p.unit_offset + p.numel());
        std::lock_guard<std::mutex> lock(mu);
        copies[p.name].push_back(std::move(both));
      }
    }
  });
  ASSERT_TRUE(copies.count("model.layers.0.input_layernorm.bias"));
  ASSERT_TRUE(copies.count("model.layers.0.self_attn.k_proj.weight"));
  ASSERT_TRUE(copies.count("model.embed_positions.weight"));
  for (const auto& [name, per_rank] : copies) {
    ASSERT_EQ(per_rank.size(), 2u) << name;
    EXPECT_EQ(per_rank[0], per_rank[1]) << name;
  }
}

TEST(TensorParallelMetrics, EvaluationMatchesOneRank) {
  auto cfg = tiny_train_config();
  cfg.model.n_heads = 4;
  cfg.model.head_dim = 4;
  cfg.model.n_kv_heads = 2;
  cfg.training.eval_rows = 16;
  const auto train_ds = varied_documents(64, 9), val_ds = varied_documents(24, 10);
  std::map<int, train::EvalResult> got;
  std::mutex mu;
  for (int tp : {1, 2, 4}) {
    cfg.parallel.tp = tp;
    cfg.parallel.sequence_parallel = tp > 1;
    comm::LaunchOptions o;
    o.mesh.tp = tp;
    o.world_size = tp;
    comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
      set_compute_threads(1);
      train::Trainer tr(cfg, ctx, train_ds, val_ds);
      const train::EvalResult e = tr.evaluate();
      std::lock_guard<std::mutex> lock(mu);
      if (ctx.rank == 0) got[tp] = e;
    });
  }
  ASSERT_GT(got[1].targets, 0);
  for (int tp : {2, 4}) {
    EXPECT_EQ(got[tp].targets, got[1].targets);
    EXPECT_NEAR(got[tp].loss, got[1].loss, 1e-5 * got[1].loss) << "tp=" << tp;
  }
}

// The gradient norm counts every element once under any layout: copies
// every tp rank keeps (norms and biases under SP, learned positions, a KV
// head shared by all ranks, the tied embedding) enter it once, not t times
// (a known failure elsewhere). A wrong norm barely shows in AdamW's update,
// so the norm itself is compared with one rank's, every step, on every rank.
TEST(TensorParallelMetrics, GradNormCountsEveryElementOnceLikeOneRank) {
  auto cfg = tiny_train_config();
  cfg.model.n_heads = 4;
  cfg.model.head_dim = 4;
  cfg.model.n_kv_heads = 1;
  cfg.model.norm = model::NormKind::LayerNorm;
  cfg.model.positions = model::PositionKind::Learned;
  cfg.model.bias = true;
  cfg.model.tied_embeddings = true;
  cfg.training.threads = 1;
  const auto ds = varied_documents(64, 9);
  struct Layout {
    int tp;
    bool sp;
    int pp;
  };
  auto norms_of = [&](const Layout& l) {
    cfg.parallel.tp = l.tp;
    cfg.parallel.sequence_parallel = l.sp;
    cfg.parallel.pp = l.pp;
    std::mutex mu;
    std::map<int, std::vector<double>> per_rank;
    with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
      std::vector<double> norms;
      for (int s = 0; s < 3; ++s) norms.push_back(t.step().grad_norm);
      std::lock_guard<std::mutex> lock(mu);
      per_rank[t.context().rank] = norms;
    });
    for (const auto& [rank, norms] : per_rank) EXPECT_EQ(norms, per_rank.begin()->second) << "rank " << rank;
    return per_rank.begin()->second;
  };
  const std::vector<double> one = norms_of({1, false, 1});
  ASSERT_EQ(one.size(), 3u);
  for (const Layout& l : {Layout{2, false, 1}, Layout{2, true, 1}, Layout{4, true, 1}, Layout{2, true, 2}}) {
    SCOPED_TRACE("tp=" + std::to_string(l.tp) + (l.sp ? ",sp=on" : "") + ",pp=" + std::to_string(l.pp));
    const std::vector<double> got = norms_of(l);
    ASSERT_EQ(got.size(), one.size());
    for (size_t s = 0; s < one.size(); ++s) EXPECT_NEAR(got[s], one[s], 1e-5 * one[s]) << "step " << s + 1;
  }
}
