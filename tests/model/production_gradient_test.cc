// The production path's gradients: the f32 model as training runs it
// (oneDNN GEMM, the kernels of every runnable ISA level: vector micro-kernels,
// vectorized exp, AVX-512 / AVX2 / scalar) against the f64 model, whose
// gradients transformer_test checks by finite differences (reference GEMM
// loop, scalar kernels). Same weights (the f32 values, widened), same batch.
//
// Tolerance: per unit, max |g32 - g64| / max |g64| < 5e-6 (normwise; fp32
// carries ~6e-8 relative per operation, sums over up to ~200 terms and two
// layers of backward; measured 6e-7 to 9e-7 at each level); loss sum
// relative 1e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "meshtrain/kernels/cpu/isa.h"
#include "meshtrain/model/transformer.h"
#include "model/model_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

// Wide enough for full vectors and masked tails: head_dim 24 (one AVX-512
// vector + 8), sequences of 70 (one full and one ragged 64-query tile),
// packed documents, GQA 2.
model::ModelConfig production_shape(bool gpt2) {
  model::ModelConfig c = gpt2 ? tiny_gpt2() : tiny_llama();
  c.vocab_size = 211;
  c.d_model = 96;
  c.n_heads = 4;
  c.n_kv_heads = gpt2 ? 4 : 2;
  c.ffn_hidden = 136;
  c.max_seq_len = 80;
  c.init_std = 0.08;
  return c;
}

OwnedBatch production_batch(int64_t vocab) {
  OwnedBatch b;
  b.rows = 2;
  b.seq = 70;
  const int64_t n = b.rows * b.seq;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = i % b.seq;
    const bool second_doc = i < b.seq && t >= 45;  // row 0 packs documents of 45 and 25 tokens
    b.tokens.push_back(int32_t((i * 37 + 11) % vocab));
    b.targets.push_back(t % 13 == 5 ? -1 : int32_t((i * 53 + 7) % vocab));  // some unsupervised
    b.positions.push_back(int32_t(second_doc ? t - 45 : t));
    b.segments.push_back(second_doc ? 1 : 0);
  }
  return b;
}

void check_against_f64(bool gpt2) {
  const model::ModelConfig cfg = production_shape(gpt2);
  const OwnedBatch b = production_batch(cfg.vocab_size);
  auto alloc = CachingAllocator::create();
  model::Transformer ref(cfg, alloc, exec_in(DType::F64));
  model::Transformer m(cfg, alloc, exec_in(DType::F32));
  for (int u = 0; u < m.num_units(); ++u) {
    const std::vector<float> w = to_vector<float>(m.params().unit_values(u));
    std::copy(w.begin(), w.end(), ref.params().unit_values(u).data<double>());
  }
  ref.params().zero_grads();
  const double coeff = 1.0 / 128;
  const auto want = ref.forward_backward(b.view(), coeff);

  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (int(isa) > int(kernels::detected_isa())) continue;
    kernels::ScopedIsa level(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    m.params().zero_grads();
    const auto got = m.forward_backward(b.view(), coeff);
    EXPECT_EQ(got.count, want.count);
    EXPECT_LT(std::abs(got.loss_sum - want.loss_sum) / want.loss_sum, 1e-6);
    for (int u = 0; u < m.num_units(); ++u) {
      const auto g32 = to_vector<float>(m.params().unit_grads(u));
      const auto g64 = to_vector<double>(ref.params().unit_grads(u));
      double err = 0, scale = 0;
      for (size_t i = 0; i < g64.size(); ++i) {
        err = std::max(err, std::abs(double(g32[i]) - g64[i]));
        scale = std::max(scale, std::abs(g64[i]));
      }
      ASSERT_GT(scale, 0.0) << "unit " << u << " carries no gradient";
      EXPECT_LT(err / scale, 5e-6) << "unit " << ref.params().spec().units[u].name;
    }
  }
}

}  // namespace

TEST(ProductionGradients, LlamaF32MatchesF64ReferenceAtEveryIsaLevel) { check_against_f64(false); }
TEST(ProductionGradients, Gpt2F32MatchesF64ReferenceAtEveryIsaLevel) { check_against_f64(true); }
