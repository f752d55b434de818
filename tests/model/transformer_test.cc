#include "meshtrain/model/transformer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/model/presets.h"
#include "model/model_fixtures.h"
#include "support/numeric.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

// Checks d(loss_sum)/d(theta) against central differences for every
// parameter element (the models are tiny), in f64.
void gradient_check(const model::ModelConfig& cfg, bool recompute) {
  auto alloc = CachingAllocator::create();
  model::Transformer m(cfg, alloc, exec_in(DType::F64, recompute));
  const OwnedBatch b = tiny_batch();
  m.params().zero_grads();
  const auto ce = m.forward_backward(b.view(), 1.0);
  EXPECT_EQ(ce.count, 10);

  auto& ps = m.params();
  double worst = 0;
  std::string worst_name;
  for (int u = 0; u < ps.num_units(); ++u) {
    double* v = ps.unit_values(u).data<double>();
    const double* g = ps.unit_grads(u).data<double>();
    for (int64_t i = 0; i < ps.unit_values(u).numel(); ++i) {
      const double x0 = v[i], h = 1e-6;
      v[i] = x0 + h;
      const double fp = m.forward_loss(b.view()).loss_sum;
      v[i] = x0 - h;
      const double fm = m.forward_loss(b.view()).loss_sum;
      v[i] = x0;
      const double fd = (fp - fm) / (2 * h);
      // Relative error with a floor of 1e-3: central differences at h = 1e-6
      // carry ~1e-9 absolute round-off on these O(10) losses.
      const double err = std::abs(fd - g[i]) / std::max({std::abs(fd), std::abs(g[i]), 1e-3});
      if (err > worst) {
        worst = err;
        worst_name = ps.spec().units[u].name + "[" + std::to_string(i) + "]";
      }
    }
  }
  EXPECT_LT(worst, 1e-5) << "worst at " << worst_name;
}

}  // namespace

TEST(Transformer, GradientCheckLlama) { gradient_check(tiny_llama(), false); }
TEST(Transformer, GradientCheckGpt2) { gradient_check(tiny_gpt2(), false); }
TEST(Transformer, GradientCheckRecompute) { gradient_check(tiny_llama(), true); }

TEST(Transformer, RecomputeIsBitwiseIdentical) {
  auto alloc = CachingAllocator::create();
  model::Transformer a(tiny_llama(), alloc, exec_in(DType::F32, false));
  model::Transformer b(tiny_llama(), alloc, exec_in(DType::F32, true));
  const OwnedBatch batch = tiny_batch();
  a.params().zero_grads();
  b.params().zero_grads();
  EXPECT_EQ(a.forward_backward(batch.view(), 0.1).loss_sum, b.forward_backward(batch.view(), 0.1).loss_sum);
  for (int u = 0; u < a.params().num_units(); ++u)
    EXPECT_EQ(to_vector<float>(a.params().unit_grads(u)), to_vector<float>(b.params().unit_grads(u)));
}

TEST(Transformer, LossIsSumAndCountUnderMask) {
  auto alloc = CachingAllocator::create();
  model::Transformer m(tiny_llama(), alloc, exec_in(DType::F64));
  OwnedBatch b = tiny_batch();
  const auto full = m.forward_loss(b.view());
  EXPECT_EQ(full.count, 10);
  // Masking one more target removes exactly that target's loss from the sum.
  Tensor logits = m.forward_logits(b.view());
  const int64_t V = 11, pos = 7;
  const double* row = logits.data<double>() + pos * V;
  double mx = row[0], z = 0;
  for (int v = 0; v < V; ++v) mx = std::max(mx, row[v]);
  for (int v = 0; v < V; ++v) z += std::exp(row[v] - mx);
  const double token_loss = -(row[b.targets[pos]] - mx - std::log(z));
  b.targets[pos] = -1;
  const auto masked = m.forward_loss(b.view());
  EXPECT_EQ(masked.count, 9);
  EXPECT_NEAR(full.loss_sum - masked.loss_sum, token_loss, 1e-12);
}

TEST(Transformer, PackedDocumentsDoNotSeeEachOther) {
  // Loss and gradients of document A do not depend on any token of document
  // B packed in the same row (docs/math.md, "Rule: packing keeps documents apart").
  auto alloc = CachingAllocator::create();
  for (const auto& cfg : {tiny_llama(), tiny_gpt2()}) {
    model::Transformer m(cfg, alloc, exec_in(DType::F64));
    OwnedBatch b = tiny_batch();
    for (int i = 3; i < 6; ++i) b.targets[i] = -1;  // supervise only document A in row 0
    m.params().zero_grads();
    const auto ce1 = m.forward_backward(b.view(), 1.0);
    std::vector<std::vector<double>> g1;
    for (int u = 0; u < m.params().num_units(); ++u) g1.push_back(to_vector<double>(m.params().unit_grads(u)));
    Tensor l1 = m.forward_logits(b.view());
    std::vector<double> logits_a1(l1.data<double>(), l1.data<double>() + 3 * 11);

    b.tokens[3] = 10;
    b.tokens[4] = 0;
    b.tokens[5] = 6;  // a different document B
    m.params().zero_grads();
    const auto ce2 = m.forward_backward(b.view(), 1.0);
    EXPECT_EQ(ce1.loss_sum, ce2.loss_sum);
    for (int u = 0; u < m.params().num_units(); ++u)
      EXPECT_EQ(g1[u], to_vector<double>(m.params().unit_grads(u))) << "unit " << u;
    Tensor l2 = m.forward_logits(b.view());
    EXPECT_EQ(logits_a1, std::vector<double>(l2.data<double>(), l2.data<double>() + 3 * 11));
  }
}

TEST(Transformer, SpecNamesAndFlops) {
  const model::ModelConfig c = model::bench_small_config();
  const auto spec = model::build_model_spec(c);
  EXPECT_NO_THROW(spec.find("model.layers.3.mlp.up_proj.weight"));
  EXPECT_EQ(spec.find("model.layers.0.self_attn.k_proj.weight").shape, (Shape{256, 512}));
  EXPECT_EQ(spec.units.size(), 10u);
  // 179.3 MFLOP per token: 6 * matmul params + 12 * layers * d * seq.
  EXPECT_NEAR(model::model_flops_per_token(c, 256) / 1e6, 179.3, 0.05);
}

TEST(ModelConfig, ImpossibleShapesAreRejected) {
  model::ModelConfig c;
  c.d_model = 100;
  c.n_heads = 3;
  EXPECT_THROW(c.finalize(), ConfigError);
  model::ModelConfig k;
  k.n_heads = 4;
  k.n_kv_heads = 3;
  try {
    k.finalize();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_kv_heads = 3 does not divide model.n_heads = 4"), std::string::npos);
  }
}

TEST(Parameters, InitIsAPureFunctionOfNameAndIndex) {
  // A shard initializing a sub-range gets exactly the full tensor's values.
  auto alloc = CachingAllocator::create();
  model::Transformer m(tiny_llama(), alloc);
  const auto& p = m.params().find("model.layers.1.mlp.down_proj.weight");
  std::vector<float> part(20);
  model::init_param_range(*p.spec, tiny_llama().seed, 30, Tensor::wrap(part.data(), Shape{20}, DType::F32));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(part[i], p.value.data<float>()[30 + i]);
}

TEST(Parameters, LazilyZeroedGradientsEqualZeroedOnesForEveryWriter) {
  // zero_grads_lazily leaves the memory as it was (NaN here): the GEMMs'
  // first write overwrites, the adding writers (embedding scatter, norms,
  // biases, a tied table written by the head and the embedding) zero first,
  // settle_grads zeroes what no backward wrote. Two micro-batches: the
  // second adds. Bitwise equal to zeroing first.
  for (const auto& cfg : {tiny_llama(), tiny_gpt2()}) {
    auto alloc = CachingAllocator::create();
    model::Transformer eager(cfg, alloc, exec_in(DType::F32)), lazy(cfg, alloc, exec_in(DType::F32));
    const OwnedBatch batch = tiny_batch();
    auto& ps = lazy.params();
    eager.params().zero_grads();
    for (int u = 0; u < ps.num_units(); ++u) {
      kernels::kernels_for(Device::Cpu).fill(ps.unit_grads(u), std::nan(""));
      ps.zero_grads_lazily(u);
    }
    for (int micro = 0; micro < 2; ++micro) {
      eager.forward_backward(batch.view(), 0.1);
      lazy.forward_backward(batch.view(), 0.1);
    }
    for (int u = 0; u < ps.num_units(); ++u) {
      ps.settle_grads(u);
      EXPECT_EQ(to_vector<float>(eager.params().unit_grads(u)), to_vector<float>(ps.unit_grads(u)))
          << ps.spec().units[size_t(u)].name;
    }
    // Nothing written this window: settling gives zeros.
    for (int u = 0; u < ps.num_units(); ++u) {
      kernels::kernels_for(Device::Cpu).fill(ps.unit_grads(u), std::nan(""));
      ps.zero_grads_lazily(u);
      ps.settle_grads(u);
      for (float g : to_vector<float>(ps.unit_grads(u))) ASSERT_EQ(g, 0.0f) << ps.spec().units[size_t(u)].name;
    }
  }
}
