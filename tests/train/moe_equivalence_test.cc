// Covers src/meshtrain/model/expert_exchange.cc (tokens to their experts' owners and back), train/ep_config.cc
// (bad expert-parallel configs), train/moe_metrics.cc (drops, tokens per expert, all-to-all bytes).
// Mixture of experts through the trainer against one rank (threads
// backend): the same global batch, 3 AdamW steps, loss, every gradient,
// update and parameter compared per tensor after each step (equivalence.h),
// under fp64 (tolerance 1e-10) and f32 (1e-4, updates 0.1): expert parallelism
// runs each (source rank, expert) block as one rank would, but an expert's
// weight gradient sums its blocks in another order (one pass on the owner
// instead of one micro-batch at a time), and dp sums in another order.
//   dropless: ep in {1, 2, 4} x dp x top-k in {1, 2} x shared expert on/off
//   with drops: dp x ep x G (same global batch) and micro-batch size give the
//   same dropped count and aux loss at every step
//   ZeRO 1 and 3 under ep; pipeline stages with ep; bad configs rejected
//   with the arithmetic; the state each rank stores, measured.
#include <gtest/gtest.h>

#include "meshtrain/train/equivalence.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

constexpr double kTolerance = 1e-4;

train::TrainConfig moe_config(int64_t top_k, bool shared, double capacity) {
  auto cfg = tiny_moe_config(top_k, shared, capacity);
  cfg.model.moe_aux_loss_coeff = 0.05;
  cfg.optimizer.lr = 1e-3;
  cfg.training.micro_batch = 2;
  cfg.training.grad_accum = 2;
  return cfg;
}

struct Routing {
  std::vector<int64_t> dropped, assigned;
  std::vector<double> aux;
  std::vector<std::vector<int64_t>> expert_tokens;
};

Routing routing_of(const train::TrainConfig& cfg, const data::TokenDataset& ds) {
  Routing out;
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    Routing mine;
    for (int s = 0; s < 3; ++s) {
      const auto m = t.step();
      mine.dropped.push_back(m.moe.dropped);
      mine.assigned.push_back(m.moe.assigned);
      mine.aux.push_back(m.moe.aux_loss);
      mine.expert_tokens.push_back(m.moe.expert_tokens);
    }
    if (t.context().rank == 0) out = mine;
  });
  return out;
}

void expect_equivalent(const train::TrainConfig& cfg, const char* layout_text, const data::TokenDataset& ds) {
  SCOPED_TRACE(layout_text);
  expect_matches_one_rank(cfg, train::parse_layout(layout_text), 3, ds, kTolerance);
}

}  // namespace

TEST(MoeEquivalence, DroplessMatchesOneRankForEveryEpDpTopKAndSharedExpert) {
  const auto ds = varied_documents(64, 5);
  for (int64_t top_k : {1, 2}) {
    for (bool shared : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "top_k=" << top_k << " shared=" << shared);
      const auto cfg = moe_config(top_k, shared, 0.0);
      for (const char* layout : {"dp=2", "dp=2,ep=2", "dp=4,ep=2", "dp=4,ep=4"}) expect_equivalent(cfg, layout, ds);
    }
  }
}

TEST(MoeEquivalence, ExpertParallelismWithZeroStagesAndAveraging) {
  const auto ds = varied_documents(64, 5);
  const auto cfg = moe_config(2, true, 1.0);
  for (const char* layout : {"dp=2,ep=2,zero=1", "dp=4,ep=2,zero=3", "dp=4,ep=4,zero=2,reduce=avg"})
    expect_equivalent(cfg, layout, ds);
}

TEST(MoeEquivalence, ReproducibleModeIsBitwiseAcrossDpEpZeroAndPipeline) {
  // Each source rank's expert gradients in a lane of their own on the
  // owner (grad_tree.h), experts aligned to norm blocks: the same bits as
  // one rank on the same global batch, whatever dp, ep, ZeRO stage or
  // pipeline split (loss, every gradient and parameter, 3 steps).
  const auto ds = varied_documents(64, 5);
  auto cfg = moe_config(2, true, 1.0);  // top-2 with drops and a shared expert
  cfg.training.reproducible = true;
  cfg.optimizer.grad_clip = 1e-3;  // clips every step: the global norm's bits reach the update
  cfg.model.ffn_hidden = 40;       // 1920 elements per expert: experts straddle the norm's 4096-element blocks
  for (const char* layout :
       {"dp=2", "dp=2,ep=2", "dp=4,ep=2,zero=1", "dp=4,ep=4,zero=3", "pp=2,dp=2,ep=2", "pp=2,dp=2,ep=2,schedule=gpipe"}) {
    SCOPED_TRACE(layout);
    const auto l = train::parse_layout(layout);
    const auto r = train::compare_with_single_rank(cfg, l, 3, ds, 0.0, /*bitwise=*/true);  // `verify --bitwise`
    EXPECT_TRUE(r.pass()) << r.str();
    if (l.ep > 1) {
      EXPECT_NE(r.str().find("expert parallelism (ep " + std::to_string(l.ep)), std::string::npos) << r.str();
    }
  }
  // The global norm itself (before clipping; AdamW hides most of its bits):
  // the same at every ep, experts straddling norm blocks or not.
  auto norms = [&](int dp, int ep, int zero) {
    auto c = cfg;
    c.parallel.dp = dp, c.parallel.ep = ep, c.parallel.zero_stage = zero;
    c.training.grad_accum = cfg.training.grad_accum * 2 / dp;  // the same micro-batches: the tree's leaves
    std::vector<double> out;
    with_trainers(c, ds, std::nullopt, [&](train::Trainer& t) {
      std::vector<double> mine;
      for (int s = 0; s < 3; ++s) mine.push_back(t.step().grad_norm);
      if (t.context().rank == 0) out = mine;
    });
    return out;
  };
  const auto ref = norms(1, 1, 0);
  EXPECT_EQ(norms(2, 2, 0), ref);
  EXPECT_EQ(norms(2, 2, 3), ref);
}

TEST(MoeEquivalence, PipelineStagesWithExpertParallelismMatchOneRank) {
  // Each pipeline stage holds one MoE block and its own experts' units;
  // experts sum over their replicas, the norm over stages and ep ranks.
  const auto ds = varied_documents(64, 5);
  const auto cfg = moe_config(2, true, 1.0);
  for (const char* layout : {"pp=2", "pp=2,dp=2,ep=2", "pp=2,dp=4,ep=2,zero=3", "pp=2,dp=2,ep=2,schedule=gpipe"})
    expect_equivalent(cfg, layout, ds);
}

TEST(MoeMemory, EachRankStoresOnlyItsExpertsAndTheirEdpShard) {
  // Measured per rank, by category: the routed experts' parameters,
  // gradients and Adam moments shrink to 1/ep (then 1/edp under ZeRO-3),
  // the dense state does not; the shard plan's bytes (docs/math.md (M.26) on the
  // padded units) predict the tracker's within the allocator's rounding.
  const auto ds = varied_documents(64, 5);
  auto cfg = moe_config(2, true, 0.0);
  cfg.model.ffn_hidden = 2048;  // experts dominate the state; unit padding stays small against them
  auto measured = [&](int dp, int ep, int zero) {
    auto c = cfg;
    c.parallel.dp = dp;
    c.parallel.ep = ep;
    c.parallel.zero_stage = zero;
    c.training.micro_batch = 4 / dp;
    std::vector<int64_t> held(static_cast<size_t>(dp));
    with_trainers(c, ds, std::nullopt, [&](train::Trainer& t) {
      t.step();
      const auto& tr = t.context().allocator->tracker();
      const int64_t state =
          tr.current(MemCategory::Params) + tr.current(MemCategory::Grads) + tr.current(MemCategory::Optimizer);
      const int64_t predicted = t.engine().plan().persistent_bytes(PrecisionPolicy::uniform(DType::F32)).total();
      EXPECT_NEAR(double(state), double(predicted), 0.01 * double(predicted)) << "rank " << t.context().rank;
      held[size_t(t.context().rank)] = state;
    });
    for (int64_t h : held) EXPECT_EQ(h, held[0]) << "every rank holds the same amount";
    return double(held[0]);
  };
  double experts = 0, dense = 0;  // 16 bytes per parameter (f32 value, gradient, two moments)
  for (const auto& p : model::build_model_spec(cfg.model).params)
    (p.expert >= 0 ? experts : dense) += 16.0 * double(p.numel());
  const double one = measured(2, 1, 0), two = measured(2, 2, 0), four = measured(4, 4, 0), zero3 = measured(4, 2, 3);
  std::printf("state per rank: dp=2 ep=1 %.0f, dp=2 ep=2 %.0f, dp=4 ep=4 %.0f, dp=4 ep=2 ZeRO-3 %.0f bytes "
              "(all experts %.0f, dense %.0f)\n", one, two, four, zero3, experts, dense);
  EXPECT_NEAR(one - two, experts / 2, 0.06 * experts);
  EXPECT_NEAR(one - four, experts * 3 / 4, 0.06 * experts);
  EXPECT_NEAR(zero3, (experts + dense) / 4, 0.06 * (experts + dense));
}

TEST(MoeEquivalence, DropsAndAuxLossDoNotDependOnTheLayout) {
  // Global window of 8 rows; R x G x B = 8 with every split of dp, ep, G and B.
  const auto ds = varied_documents(64, 5);
  auto cfg = moe_config(2, false, 0.75);
  struct Split {
    int dp, ep;
    int64_t G, B;
  };
  cfg.training.grad_accum = 8;
  cfg.training.micro_batch = 1;
  const Routing ref = routing_of(cfg, ds);
  ASSERT_GT(ref.dropped[0], 0) << "capacity 0.75 must drop tokens for this test to mean anything";
  for (const Split s : {Split{1, 1, 2, 4}, Split{2, 1, 4, 1}, Split{2, 2, 2, 2}, Split{4, 2, 1, 2}, Split{4, 4, 2, 1}}) {
    SCOPED_TRACE(::testing::Message() << "dp=" << s.dp << " ep=" << s.ep << " G=" << s.G << " B=" << s.B);
    auto c = cfg;
    c.parallel.dp = s.dp;
    c.parallel.ep = s.ep;
    c.training.grad_accum = s.G;
    c.training.micro_batch = s.B;
    const Routing got = routing_of(c, ds);
    EXPECT_EQ(got.dropped, ref.dropped);
    EXPECT_EQ(got.assigned, ref.assigned);
    EXPECT_EQ(got.expert_tokens, ref.expert_tokens);
    for (size_t i = 0; i < ref.aux.size(); ++i) EXPECT_NEAR(got.aux[i], ref.aux[i], 1e-6 * ref.aux[i]) << "step " << i;
  }
}

TEST(MoeEquivalence, WithDropsTheUpdateMatchesOneRank) {
  const auto ds = varied_documents(64, 5);
  const auto cfg = moe_config(2, false, 0.75);
  for (const char* layout : {"dp=2,ep=2", "dp=4,ep=4"}) expect_equivalent(cfg, layout, ds);
}

TEST(MoeEquivalence, ExpertParallelismExchangesTheFormulaPayload) {
  // Dropless, every token routed: the dispatch + combine payload is the
  // formula's 2 N k d b_e plus the bucket padding (at most 25% + 8 rows per block).
  const auto ds = varied_documents(64, 5);
  auto cfg = moe_config(2, false, 0.0);
  cfg.parallel.dp = 2;
  cfg.parallel.ep = 2;
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    const auto m = t.step();
    EXPECT_GT(m.moe.a2a_formula_bytes, 0);
    EXPECT_GE(double(m.moe.a2a_bytes), m.moe.a2a_formula_bytes);
    const double blocks = 2.0 * 4 * 2 * cfg.model.n_layers * 2;  // (rank, expert, micro-batch, block, direction)
    EXPECT_LE(double(m.moe.a2a_bytes), 1.25 * m.moe.a2a_formula_bytes + blocks * 8 * 16 * 4);
  });
}

TEST(MoeConfig, BadExpertParallelConfigsAreRejectedWithTheArithmetic) {
  auto expect_error = [](train::TrainConfig c, const std::string& text) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted, expected: " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  auto c = moe_config(2, false, 0.0);
  c.parallel.dp = 4;
  c.parallel.ep = 3;
  expect_error(c, "model.n_experts = 4 does not split over parallel.ep = 3 (4 % 3 = 1)");
  c.model.n_experts = 6;
  c.parallel.dp = 4;
  expect_error(c, "parallel.ep = 3 must divide parallel.dp = 4 (4 % 3 = 1)");
  c.parallel.ep = 1;
  c.parallel.cp = 2;
  expect_error(c, "routes tokens per row, but parallel.cp = 2 splits every row");
  c = moe_config(2, false, 0.0);
  c.model.n_experts = 0;
  c.parallel.dp = 2;
  c.parallel.ep = 2;
  expect_error(c, "model.n_experts = 0: set model.n_experts");
  c = moe_config(5, false, 0.0);
  expect_error(c, "model.experts_top_k = 5: expected 1 <= top_k <= model.n_experts = 4");
  EXPECT_THROW(train::parse_layout("dp=2,ep=4"), ConfigError);
}
