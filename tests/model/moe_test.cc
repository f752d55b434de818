// Covers src/meshtrain/model/moe_layer.cc.
// Mixture-of-experts layer: routing rules (ties, capacity, buckets), the
// gradient against central differences in f64 (cross-entropy plus aux
// loss, dropless and with drops, shared expert, recomputation), and routing
// that does not depend on how rows are split into micro-batches.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "meshtrain/kernels/moe_routing.h"
#include "meshtrain/model/transformer.h"
#include "model/model_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

model::ModelConfig tiny_moe(int64_t experts, int64_t top_k, double capacity, bool shared) {
  model::ModelConfig c = tiny_llama();
  c.n_experts = experts;
  c.experts_top_k = top_k;
  c.moe_capacity_factor = capacity;
  c.moe_shared_expert = shared;
  c.moe_aux_loss_coeff = 0.5;  // large, so its gradient is checked too
  c.moe_layers = {1};          // block 0 dense, block 1 MoE
  return c;
}

struct Objective {
  double ce = 0, aux = 0;
  int64_t dropped = 0;
};

// forward_backward with coefficient 1: grads of CE sum + aux sum.
Objective run(model::Transformer& m, const model::TokenBatch& b) {
  m.moe_stats().reset();
  const auto ce = m.forward_backward(b, 1.0);
  Objective o{ce.loss_sum, m.moe_stats().aux_sum(), 0};
  for (const auto& l : m.moe_stats().layers) o.dropped += l.dropped;
  return o;
}

void gradient_check(const model::ModelConfig& cfg, bool recompute, bool expect_drops) {
  auto alloc = CachingAllocator::create();
  model::Transformer m(cfg, alloc, exec_in(DType::F64, recompute));
  const OwnedBatch b = tiny_batch();
  m.params().zero_grads();
  const Objective o = run(m, b.view());
  EXPECT_GT(o.aux, 0);
  EXPECT_EQ(o.dropped > 0, expect_drops) << o.dropped;
  auto& ps = m.params();
  std::vector<std::vector<double>> grads;
  for (int u = 0; u < ps.num_units(); ++u) {
    const double* g = ps.unit_grads(u).data<double>();
    grads.emplace_back(g, g + ps.unit_grads(u).numel());
  }
  double worst = 0;
  std::string worst_name;
  for (int u = 0; u < ps.num_units(); ++u) {
    double* v = ps.unit_values(u).data<double>();
    for (int64_t i = 0; i < ps.unit_values(u).numel(); ++i) {
      const double x0 = v[i], h = 1e-6;
      v[i] = x0 + h;
      const Objective p = run(m, b.view());
      v[i] = x0 - h;
      const Objective q = run(m, b.view());
      v[i] = x0;
      const double fd = (p.ce + p.aux - q.ce - q.aux) / (2 * h);
      const double g = grads[size_t(u)][size_t(i)];
      const double err = std::abs(fd - g) / std::max({std::abs(fd), std::abs(g), 1e-3});
      if (err > worst) {
        worst = err;
        worst_name = ps.spec().units[size_t(u)].name + "[" + std::to_string(i) + "]";
      }
    }
  }
  EXPECT_LT(worst, 1e-5) << "worst at " << worst_name;
}

kernels::MoeRouting route(const std::vector<double>& logits, int64_t E, int64_t k, int64_t seq, double cf) {
  return kernels::route_tokens({E, k, seq, cf, 1.0}, logits.data(), int64_t(logits.size()) / E);
}

}  // namespace

TEST(MoeGradients, DroplessTop2MatchesFiniteDifferences) { gradient_check(tiny_moe(4, 2, 0.0, false), false, false); }
TEST(MoeGradients, SharedExpertTop1MatchesFiniteDifferences) { gradient_check(tiny_moe(3, 1, 0.0, true), false, false); }
TEST(MoeGradients, WithDropsMatchesFiniteDifferences) { gradient_check(tiny_moe(4, 2, 0.5, false), false, true); }
TEST(MoeGradients, RecomputeMatchesFiniteDifferences) { gradient_check(tiny_moe(4, 2, 0.0, true), true, false); }
TEST(MoeGradients, TopKEqualsExpertsMatchesFiniteDifferences) { gradient_check(tiny_moe(3, 3, 0.0, false), false, false); }
TEST(MoeGradients, RenormalizedGatesMatchFiniteDifferences) {
  auto c = tiny_moe(4, 2, 0.0, false);
  c.moe_renormalize = true;
  gradient_check(c, false, false);
  c.moe_capacity_factor = 0.5;  // a dropped slot still counts in its token's top-k sum
  gradient_check(c, false, true);
}

// Mixtral's rule: a token's kept gates are its top-k probabilities over their sum.
TEST(MoeRouting, RenormalizedGatesSumToOnePerToken) {
  const std::vector<double> logits = {2.0, 1.0, 0.0, -1.0, 0.5, 0.5, 3.0, 0.0};
  kernels::MoeRoutingConfig cfg{4, 2, 2, 0.0, 0.0, true};
  const auto r = kernels::route_tokens(cfg, logits.data(), 2);
  ASSERT_EQ(r.comb_gate.size(), 4u);
  EXPECT_NEAR(r.comb_gate[0] + r.comb_gate[1], 1.0, 1e-15);
  EXPECT_NEAR(r.comb_gate[2] + r.comb_gate[3], 1.0, 1e-15);
  EXPECT_NEAR(r.comb_gate[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-15);  // e^2 / (e^2 + e^1)
  cfg.renormalize = false;
  const auto plain = kernels::route_tokens(cfg, logits.data(), 2);
  EXPECT_LT(plain.comb_gate[0] + plain.comb_gate[1], 0.95);
}

TEST(MoeRouting, TopKTiesGoToTheLowerExpertIndex) {
  // Equal logits: experts 0 and 1 win, in index order.
  const auto r = route({1, 1, 1, 1}, 4, 2, 1, 0.0);
  EXPECT_EQ(r.slot_expert, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r.count, (std::vector<int64_t>{1, 1, 0, 0}));  // experts 2, 3 receive nothing
}

TEST(MoeRouting, CapacityKeepsTheMostProbableThenTheEarlierToken) {
  // One row of 4 tokens, 2 experts, top-1, capacity ceil(0.5 * 4 / 2) = 1.
  // Every token prefers expert 0; token 2 is the most confident, tokens 0
  // and 3 tie for second: with capacity 1 only token 2 is kept.
  const std::vector<double> logits = {1, 0, 0.5, 0, 3, 0, 1, 0};
  const auto r = route(logits, 2, 1, 4, 0.5);
  EXPECT_EQ(r.capacity, 1);
  EXPECT_EQ(r.slot_kept, (std::vector<uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(r.dropped, 3);
  EXPECT_EQ(r.comb_token, (std::vector<int32_t>{2}));
  // Capacity 2 (factor 1): the tie between tokens 0 and 3 goes to token 0.
  const auto r2 = route(logits, 2, 1, 4, 1.0);
  EXPECT_EQ(r2.slot_kept, (std::vector<uint8_t>{1, 0, 1, 0}));
}

TEST(MoeRouting, AllTokensToOneExpertAndTheAuxLoss) {
  // Expert 1 takes everything: f = (0, 1), aux per row = E * sum_t p_t1.
  const std::vector<double> logits = {0, 5, 0, 5, 0, 5};
  const auto r = route(logits, 2, 1, 3, 0.0);
  EXPECT_EQ(r.count, (std::vector<int64_t>{0, 3}));
  const double p1 = std::exp(5.0) / (1 + std::exp(5.0));
  EXPECT_NEAR(r.aux_sum, 2 * 3 * p1, 1e-12);
  EXPECT_EQ(r.begin, (std::vector<int64_t>{0, 0, 8}));  // one bucket of 8 rows
}

TEST(MoeRouting, DecisionsArePerRowSoMicroBatchSplitsAgree) {
  // Two rows routed together or one at a time: same drops and aux sum.
  std::vector<double> logits;
  for (int i = 0; i < 2 * 6 * 4; ++i) logits.push_back(std::sin(1.7 * i));
  const auto both = route(logits, 4, 2, 6, 0.75);
  const auto r0 = route({logits.begin(), logits.begin() + 24}, 4, 2, 6, 0.75);
  const auto r1 = route({logits.begin() + 24, logits.end()}, 4, 2, 6, 0.75);
  std::vector<uint8_t> split = r0.slot_kept;
  split.insert(split.end(), r1.slot_kept.begin(), r1.slot_kept.end());
  EXPECT_EQ(both.slot_kept, split);
  EXPECT_GT(both.dropped, 0);
  EXPECT_DOUBLE_EQ(both.aux_sum, r0.aux_sum + r1.aux_sum);
}

TEST(MoeRouting, BucketsBoundTheBufferSizes) {
  EXPECT_EQ(kernels::expert_rows_bucket(0), 0);
  EXPECT_EQ(kernels::expert_rows_bucket(1), 8);
  EXPECT_EQ(kernels::expert_rows_bucket(9), 16);
  EXPECT_EQ(kernels::expert_rows_bucket(100), 112);  // step 16 in [64, 128)
  std::set<int64_t> sizes;
  for (int64_t c = 1; c <= 4096; ++c) {
    const int64_t b = kernels::expert_rows_bucket(c);
    EXPECT_GE(b, c);
    EXPECT_LE(b, c + std::max<int64_t>(7, c / 4));
    sizes.insert(b);
  }
  EXPECT_LT(sizes.size(), 60u);  // about 4 sizes per octave
}

TEST(MoeModel, MicroBatchSplitGivesTheSameGradients) {
  // One micro-batch of two rows vs two of one row each (coefficient 1):
  // the same tokens drop, the same aux loss, the same gradients.
  model::ModelConfig cfg = tiny_moe(4, 2, 0.5, true);
  auto alloc = CachingAllocator::create();
  model::Transformer whole(cfg, alloc, exec_in(DType::F64)), split(cfg, alloc, exec_in(DType::F64));
  const OwnedBatch b = tiny_batch();
  whole.params().zero_grads();
  split.params().zero_grads();
  const Objective o = run(whole, b.view());
  model::TokenBatch rows[2];
  Objective parts;
  for (int r = 0; r < 2; ++r) {
    rows[r] = b.view();
    rows[r].rows = 1;
    rows[r].tokens += r * b.seq;
    rows[r].targets += r * b.seq;
    rows[r].positions += r * b.seq;
    rows[r].segments += r * b.seq;
    const Objective p = run(split, rows[r]);
    parts.ce += p.ce;
    parts.aux += p.aux;
    parts.dropped += p.dropped;
  }
  EXPECT_GT(o.dropped, 0);
  EXPECT_EQ(o.dropped, parts.dropped);
  EXPECT_NEAR(o.aux, parts.aux, 1e-12);
  EXPECT_NEAR(o.ce, parts.ce, 1e-12);
  for (int u = 0; u < whole.params().num_units(); ++u) {
    const double* g = whole.params().unit_grads(u).data<double>();
    const double* h = split.params().unit_grads(u).data<double>();
    for (int64_t i = 0; i < whole.params().unit_grads(u).numel(); ++i) EXPECT_NEAR(g[i], h[i], 1e-12) << u << " " << i;
  }
}

namespace {

// finalize() refuses `c` with a ConfigError holding `text`.
void expect_error(model::ModelConfig c, const std::string& text) {
  try {
    c.finalize();
    ADD_FAILURE() << "accepted, expected: " << text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(MoeConfig, BadKeysAreRejectedWithTheArithmetic) {
  expect_error(tiny_moe(4, 5, 0, false), "model.experts_top_k = 5: expected 1 <= top_k <= model.n_experts = 4");
  expect_error(tiny_moe(4, 2, -1, false), "model.moe_capacity_factor = -1");
  model::ModelConfig c = tiny_moe(4, 2, 0, false);
  c.moe_layers = {0, 2};
  expect_error(c, "model.moe_layers[1] = 2: outside the blocks [0, model.n_layers = 2)");
  EXPECT_THROW(model::check_tensor_parallel(tiny_moe(4, 2, 0, false), 2), ConfigError);
}

// Every MoE number is finite and bounded before anything is sized from it:
// an infinite capacity once saved `null` into checkpoints (and logged 100%
// dropped), an infinite aux coefficient skipped every step, and 2^31
// experts grew the model spec toward the OOM killer.
TEST(MoeConfig, EveryKeyIsFiniteAndBounded) {
  for (double f : {std::numeric_limits<double>::infinity(), 1e30, std::nan(""), 4.5})
    expect_error(tiny_moe(4, 2, f, false), "model.moe_capacity_factor = ");
  expect_error(tiny_moe(4, 2, 1e30, false), "expected a finite value in [0, model.n_experts = 4]");
  for (double coeff : {std::numeric_limits<double>::infinity(), 1e30, -0.5}) {
    model::ModelConfig c = tiny_moe(4, 2, 0, false);
    c.moe_aux_loss_coeff = coeff;
    expect_error(c, "model.moe_aux_loss_coeff = ");
  }
  for (int64_t n : {int64_t(2147483648), int64_t(1000000), int64_t(4097)})
    expect_error(tiny_moe(n, 2, 0, false), "model.n_experts = " + std::to_string(n) + ": at most 4096");
  model::ModelConfig c = tiny_moe(4096, 2, 0, false);
  c.moe_layers.clear();
  c.n_layers = 17;  // 17 MoE blocks of 4096 experts
  expect_error(c, "model.n_experts x MoE blocks = 4096 x 17: at most 65536");
  c.moe_layers = {0, 16};  // two of them
  EXPECT_NO_THROW(c.finalize());
  EXPECT_NO_THROW(tiny_moe(4, 2, 2.0, false).finalize());  // f = n_experts / top_k: never drops
}

TEST(MoeModel, SpecCountsOnlyActiveExpertsInTheFlops) {
  const model::ModelConfig cfg = tiny_moe(4, 2, 0, true);
  model::ModelConfig c = cfg;
  c.finalize();
  const auto spec = model::build_model_spec(c);
  EXPECT_NE(spec.find_or_null("model.layers.1.mlp.experts.3.down_proj.weight"), nullptr);
  EXPECT_EQ(spec.find("model.layers.1.mlp.experts.3.up_proj.weight").expert, 3);
  EXPECT_EQ(spec.find("model.layers.1.mlp.router.weight").expert, -1);
  EXPECT_NE(spec.find_or_null("model.layers.1.mlp.shared_expert.gate_proj.weight"), nullptr);
  EXPECT_EQ(spec.find_or_null("model.layers.0.mlp.experts.0.up_proj.weight"), nullptr);  // block 0 dense
  int64_t expert_elems = 0, matrices = 0;
  for (const auto& p : spec.params) {
    if (p.expert >= 0) expert_elems += p.numel();
    if (p.shape.rank() == 2 && p.name != "model.embed_tokens.weight") matrices += p.numel();
  }
  // 4 experts of which 2 run per token; the shared expert and the router count whole.
  EXPECT_EQ(spec.matmul_params(c), matrices - expert_elems / 2);
}
