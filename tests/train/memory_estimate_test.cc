// Covers src/meshtrain/core/memory_limits.cc (available memory against the
// estimate) and train/memory_estimate.cc: the per-rank estimate of eval,
// generate and bench comm follows docs/math.md (M.26), and a command that
// cannot fit is refused with the figures before anything is allocated.
#include "meshtrain/train/memory_estimate.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/model/presets.h"
#include "meshtrain/train/train_config.h"

using namespace meshtrain;

namespace {

train::TrainConfig bench_small(int stage) {
  train::TrainConfig c;
  c.model = model::bench_small_config();
  c.data.path = "<memory>";
  c.data.seq_len = 256;
  c.training.micro_batch = 4;
  c.parallel.zero_stage = stage;
  return c;
}

}  // namespace

TEST(MemoryEstimate, PersistentStateFollowsTheZeroFormulas) {
  const int64_t n = model::build_model_spec(model::bench_small_config()).total_params();
  const int R = 4;
  const auto s0 = train::estimate_rank_memory(bench_small(0), R), s1 = train::estimate_rank_memory(bench_small(1), R),
             s2 = train::estimate_rank_memory(bench_small(2), R), s3 = train::estimate_rank_memory(bench_small(3), R);
  // P_s = G_s = 4n bytes (f32), O_s = 8n (AdamW m, v).
  EXPECT_EQ(s0.params + s0.grads + s0.optimizer, 16 * n);              // (M.26), stage 0
  EXPECT_EQ(s1.params + s1.grads + s1.optimizer, 8 * n + 8 * n / R);   // (M.26), stage 1
  EXPECT_EQ(s2.params + s2.grads + s2.optimizer, 4 * n + 12 * n / R);  // (M.26), stage 2
  EXPECT_EQ(s3.params + s3.grads + s3.optimizer, 16 * n / R);          // (M.26), stage 3
  EXPECT_GT(s3.workspace, s2.workspace) << "stage 3 holds a gathered unit and its prefetch";
  // Activations grow with the micro-batch and shrink under recomputation.
  auto big = bench_small(0);
  big.training.micro_batch = 8;
  EXPECT_GT(train::estimate_rank_memory(big, R).activations, s0.activations);
  big.training.recompute = true;
  EXPECT_LT(train::estimate_rank_memory(big, R).activations, s0.activations * 2);
}

// Tensor and pipeline parallelism split the weights: a tp x pp rank holds
// about 1/(tp pp) of the model state, and tp splits the heads' activations.
TEST(MemoryEstimate, TensorAndPipelineRanksHoldTheirShare) {
  const auto one = train::estimate_rank_memory(bench_small(0), 1);
  auto split = bench_small(0);
  split.parallel.tp = 2;
  split.parallel.pp = 2;
  const auto e = train::estimate_rank_memory(split, 1);
  const int64_t state = one.params + one.grads + one.optimizer, split_state = e.params + e.grads + e.optimizer;
  EXPECT_LE(split_state * 4, state + 64) << "a quarter of the state, up to rounding";
  EXPECT_GE(split_state * 4, state - 64);
  EXPECT_LT(e.activations, one.activations) << "tp splits heads, hidden units and logits";
  EXPECT_GT(e.activations, one.activations / 4) << "the residual stream is not split without SP";
}

// A MoE block runs top_k experts per token and keeps the router's logits
// and probabilities per expert: the estimate grows with both (it once
// counted one dense feed-forward whatever the routing).
TEST(MemoryEstimate, MixtureOfExpertsActivationsFollowTheRouting) {
  auto moe = bench_small(0);
  moe.model.n_experts = 8;
  moe.model.experts_top_k = 1;
  const auto top1 = train::estimate_rank_memory(moe, 1);
  moe.model.experts_top_k = 4;
  const auto top4 = train::estimate_rank_memory(moe, 1);
  EXPECT_GT(top4.activations, top1.activations) << "four experts' hidden tensors per token, not one";
  moe.model.n_experts = 512;
  EXPECT_GT(train::estimate_rank_memory(moe, 1).activations, top4.activations) << "router probabilities per expert";
  EXPECT_GT(top1.activations, train::estimate_rank_memory(bench_small(0), 1).activations)
      << "the expert blocks' inputs and outputs beside the dense hidden tensors";
}

// What another command holds is checked the same way: a model for
// generate (weights and their gradient buffers, no optimizer state).
TEST(MemoryEstimate, AModelHeldForGenerationHasNoOptimizerState) {
  auto cfg = bench_small(0);
  const auto train_e = train::estimate_rank_memory(cfg, 1);
  const auto gen = train::estimate_model_memory(cfg.model, 1, cfg.model.max_seq_len);
  EXPECT_EQ(gen.optimizer, 0);
  EXPECT_EQ(gen.params, train_e.params);
  EXPECT_LT(gen.total(), train_e.total());
  try {
    train::check_memory_budget(gen, 1, AvailableMemory{gen.total() / 2, "test"}, "use a bigger machine");
    FAIL() << "half the estimate was enough";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("use a bigger machine"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("optimizer"), std::string::npos) << "zero categories are not listed";
  }
}

TEST(MemoryEstimate, RefusedWithTheFiguresWarnedWhenClose) {
  const auto e = train::estimate_rank_memory(bench_small(0), 2);
  const AvailableMemory plenty{e.total() * 10, "test"}, tight{e.total() * 2 + e.total() / 10, "test"},
      short_of{e.total(), "cgroup limit 1 GiB"};
  EXPECT_EQ(train::check_memory_budget(e, 2, plenty, "use a bigger machine"), "");
  EXPECT_NE(train::check_memory_budget(e, 2, tight, "use a bigger machine").find("warning"), std::string::npos);
  try {
    train::check_memory_budget(e, 2, short_of, "use a bigger machine");
    FAIL() << "two ranks of the estimate do not fit in one";
  } catch (const ConfigError& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find("does not fit"), std::string::npos) << msg;
    EXPECT_NE(msg.find("x 2 ranks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("optimizer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cgroup limit 1 GiB"), std::string::npos) << msg;
  }
}

TEST(MemoryLimits, ParsesMeminfoAndCgroupFiles) {
  EXPECT_EQ(parse_meminfo_available("MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable:   2048 kB\n"), 2048 * 1024);
  EXPECT_EQ(parse_meminfo_available("MemTotal: 100 kB\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("3221225472\n"), int64_t(3221225472));
  EXPECT_EQ(parse_cgroup_memory_limit("max\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("9223372036854771712\n"), std::nullopt);  // v1 "unlimited"
  const auto a = available_memory();
  ASSERT_TRUE(a.has_value());
  EXPECT_GT(a->bytes, 0);
}

// Context parallelism: ZeRO shards over dp x cp, and a rank computes
// seq / cp positions of each row (its activations halve at cp = 2).
TEST(MemoryEstimate, ContextParallelShardsStateOverDpTimesCpAndSplitsActivations) {
  auto cp2 = bench_small(3);
  cp2.parallel.cp = 2;
  const auto dp4 = train::estimate_rank_memory(bench_small(3), 4), dp2_cp2 = train::estimate_rank_memory(cp2, 2);
  EXPECT_EQ(dp2_cp2.params + dp2_cp2.grads + dp2_cp2.optimizer, dp4.params + dp4.grads + dp4.optimizer);
  EXPECT_EQ(2 * dp2_cp2.activations, train::estimate_rank_memory(bench_small(3), 2).activations);
}

// Routed experts: a rank holds 1/ep of them (then 1/R of everything once
// sharded), as the layout plan places them (parallel/layout_plan.h).
TEST(MemoryEstimate, ExpertParallelRanksHoldTheirExperts) {
  auto moe = bench_small(0);
  moe.model.n_experts = 8;
  moe.model.experts_top_k = 2;
  moe.model.ffn_hidden = 704;
  int64_t experts = 0, all = 0;
  for (const auto& u : model::build_model_spec(moe.model).units) (u.experts ? experts : all) += u.numel;
  all += experts;
  const int R = 4;
  auto state = [&](int ep, int stage) {
    auto c = moe;
    c.parallel.ep = ep;
    c.parallel.zero_stage = stage;
    const auto e = train::estimate_rank_memory(c, R);
    return e.params + e.grads + e.optimizer;
  };
  EXPECT_EQ(state(1, 0), 16 * all);
  EXPECT_EQ(state(2, 0), 16 * (all - experts / 2));
  EXPECT_EQ(state(4, 0), 16 * (all - experts * 3 / 4));
  EXPECT_NEAR(double(state(2, 3)), 16.0 * double(all) / R, 16.0);  // (M.26), stage 3: dense and expert groups alike
}
