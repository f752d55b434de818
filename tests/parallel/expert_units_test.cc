// Covers src/meshtrain/parallel/unit_groups.h (the group each unit sums over)
// and the expert units of model/param_spec.cc and parallel/shard_plan.cc.
// Routed experts under expert parallelism (docs/math.md, "Rule: where experts
// live", (M.13), (M.26)): for dp in {1, 2, 4, 8} x ep dividing dp x pp in
// {1, 2} x ZeRO stages 0-3, every expert parameter sits in its block's expert
// unit, is held only by the ranks whose ep coordinate owns it (n_experts / ep
// experts per rank), is sharded over the expert-data-parallel group, and
// every element is owned (optimizer, norm) and written to a checkpoint
// exactly once over the whole world; dense parameters are unchanged.
#include <gtest/gtest.h>

#include <map>

#include "meshtrain/parallel/layout_plan.h"

using namespace meshtrain;

namespace {

model::ModelConfig moe_model() {
  model::ModelConfig c;
  c.vocab_size = 37;
  c.d_model = 16;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.ffn_hidden = 24;
  c.max_seq_len = 8;
  c.n_experts = 8;
  c.experts_top_k = 2;
  c.moe_layers = {1, 3};
  c.moe_shared_expert = true;
  c.finalize();
  return c;
}

// How many ranks own (optimizer range) and write (checkpoint) each element.
struct Count {
  std::vector<int> owned, written;
};

}  // namespace

TEST(ExpertUnits, EveryBlocksExpertsFormAUnitOfTheirOwnAfterTheSegments) {
  const auto cfg = moe_model();
  const model::ModelSpec spec = model::build_model_spec(cfg);
  ASSERT_EQ(spec.units.size(), size_t(cfg.n_layers + 2 + 2));
  for (int l : {1, 3}) {
    const model::ParamUnit& u = spec.units[size_t(cfg.n_layers + 2 + (l == 1 ? 0 : 1))];
    EXPECT_TRUE(u.experts);
    EXPECT_EQ(u.segment, l + 1);
    EXPECT_EQ(u.name, "layers." + std::to_string(l) + ".experts");
    EXPECT_EQ(u.params.size(), size_t(cfg.n_experts * 3));  // gate, up, down per expert
    EXPECT_EQ(spec.segment_units(l + 1), (std::vector<int>{l + 1, int(spec.units.size()) - (l == 1 ? 2 : 1)}));
    // The block's own unit keeps the router and the shared expert, no routed expert.
    for (int i : spec.units[size_t(l + 1)].params)
      EXPECT_LT(spec.params[size_t(i)].expert, 0) << spec.params[size_t(i)].name;
  }
  // Every expert starts on a norm block on every ep: the global norm's
  // blocks hold the same elements whichever experts share a unit.
  for (int ep : {1, 2, 4}) {
    model::ModelPartition part;
    part.ep_size = ep;
    part.ep_rank = ep - 1;
    const model::ModelSpec local = model::localize(spec, cfg, part);
    int starts = 0;
    for (const model::ParamUnit& u : local.units) {
      int last = -1;
      for (int i : u.params) {
        const model::ParamSpec& p = local.params[size_t(i)];
        if (p.expert < 0 || p.expert == last) continue;
        last = p.expert;
        EXPECT_EQ(p.unit_offset % parallel::kNormBlock, 0) << p.name << " at ep " << ep;
        ++starts;
      }
    }
    EXPECT_EQ(starts, 2 * cfg.n_experts / ep);
  }
  // Parameters keep their order (and so their initial values, drawn from their global index).
  for (size_t i = 0; i < spec.params.size(); ++i) EXPECT_EQ(spec.params[i].global_index, int(i));
}

TEST(ExpertUnits, HeldOnlyByOwnersShardedOverTheirReplicasCountedOnce) {
  const auto cfg = moe_model();
  const model::ModelSpec global = model::build_model_spec(cfg);
  int meshes = 0;
  for (int pp : {1, 2})
    for (int dp : {1, 2, 4, 8})
      for (int ep = 1; ep <= dp; ep *= 2)
        for (int zero = 0; zero <= 3; ++zero) {
          if (pp * dp > 8) continue;
          comm::MeshShape mesh;
          mesh.pp = pp, mesh.dp = dp, mesh.ep = ep;
          SCOPED_TRACE(mesh.str() + " zero " + std::to_string(zero));
          parallel::LayoutOptions options;
          options.zero_stage = zero;
          std::map<std::string, Count> count;
          for (const auto& p : global.params)
            count[p.name] = {std::vector<int>(size_t(p.numel())), std::vector<int>(size_t(p.numel()))};
          for (int r = 0; r < mesh.world_size(); ++r) {
            const parallel::LayoutPlan plan(cfg, mesh, r, options);
            const parallel::ShardPlan& shards = plan.shards();
            const int owner_first = plan.coord(comm::Axis::Ep) * int(cfg.n_experts / ep);
            for (int u = 0; u < shards.num_units(); ++u) {
              const parallel::UnitShard& s = shards.unit(u);
              EXPECT_EQ(s.experts, plan.spec().units[size_t(u)].experts);
              EXPECT_EQ(s.group_size, s.experts ? dp / ep : dp) << "unit " << u;
              EXPECT_EQ(s.group_rank, s.experts ? plan.coord(comm::Axis::Edp) : plan.coord(comm::Axis::Dp));
              if (s.numel == 0) continue;
              const auto [sb, se] = shards.save_range(u);
              for (const parallel::OwnedPiece& o : shards.owned_pieces(u)) {
                const model::ParamSpec& p = plan.spec().params[size_t(o.param)];
                EXPECT_EQ(plan.param(o.param).stages, std::vector<int>{plan.coord(comm::Axis::Pp)}) << p.name;
                if (p.expert >= 0) {
                  EXPECT_GE(p.expert, owner_first) << p.name << " held by a rank that does not own it";
                  EXPECT_LT(p.expert, owner_first + cfg.n_experts / ep) << p.name;
                  EXPECT_EQ(plan.param(o.param).reduce_axes, comm::Axes(comm::Axis::Edp));
                }
                if (!plan.param(o.param).counts_in_norm) continue;
                for (int64_t e = o.param_begin; e < o.param_end; ++e) count[p.name].owned[size_t(p.global_flat(e))]++;
              }
              for (const parallel::OwnedPiece& o : shards.pieces_in(u, sb, se)) {
                const model::ParamSpec& p = plan.spec().params[size_t(o.param)];
                if (!plan.param(o.param).writes_checkpoint) continue;
                for (int64_t e = o.param_begin; e < o.param_end; ++e) count[p.name].written[size_t(p.global_flat(e))]++;
              }
            }
            // Persistent bytes: the experts' part is 1/ep of all experts (unpadded).
            int64_t expert_elems = 0;
            for (const auto& p : plan.spec().params) expert_elems += p.expert >= 0 ? p.numel() : 0;
            int64_t all_expert_elems = 0;
            for (const auto& p : global.params) all_expert_elems += p.expert >= 0 ? p.numel() : 0;
            // Each of the pp = 2 stages holds one of the two MoE blocks.
            EXPECT_EQ(expert_elems * ep * pp, all_expert_elems);
          }
          for (const auto& [name, c] : count) {
            // Under ZeRO stage 0 every replica of the data group (or edp group) owns the whole unit:
            // the replicas are counted by the group's size.
            const bool expert = name.find(".experts.") != std::string::npos;
            const int replicas = zero == 0 ? (expert ? dp / ep : dp) : 1;
            for (size_t g = 0; g < c.owned.size(); ++g) {
              ASSERT_EQ(c.owned[g], replicas) << name << " element " << g << " owned " << c.owned[g] << " times";
              ASSERT_EQ(c.written[g], 1) << name << " element " << g << " written " << c.written[g] << " times";
            }
          }
          ++meshes;
        }
  EXPECT_EQ(meshes, 2 * 4 * (1 + 2 + 3 + 4) - 4 * 4);  // pp = 2 with dp = 8 exceeds 8 ranks
}

TEST(ExpertUnits, ExpertStateShrinksWithEpAndShardsOverEdp) {
  auto cfg = moe_model();
  cfg.ffn_hidden = 256;  // an expert is 3 x 16 x 256 = 3 norm blocks: shards split whole experts evenly
  const PrecisionPolicy fp32 = PrecisionPolicy::uniform(DType::F32);
  auto expert_bytes = [&](int dp, int ep, int zero) {
    comm::MeshShape mesh;
    mesh.dp = dp, mesh.ep = ep;
    parallel::LayoutOptions options;
    options.zero_stage = zero;
    const parallel::LayoutPlan plan(cfg, mesh, 0, options);
    int64_t bytes = 0;
    for (size_t i = 0; i < plan.spec().params.size(); ++i)
      if (plan.spec().params[i].expert >= 0) bytes += parallel::param_bytes(plan, int(i), fp32).total();
    return bytes;
  };
  // 16 bytes per expert parameter held: 1/ep of the experts, then 1/edp of those under ZeRO-3.
  const int64_t all = expert_bytes(1, 1, 0);
  EXPECT_EQ(expert_bytes(4, 2, 0) * 2, all);
  EXPECT_EQ(expert_bytes(4, 4, 0) * 4, all);
  EXPECT_EQ(expert_bytes(4, 2, 3) * 4, all);
  EXPECT_EQ(expert_bytes(8, 2, 3) * 8, all);
}
