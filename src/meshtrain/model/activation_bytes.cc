#include "meshtrain/model/activation_bytes.h"

#include "meshtrain/core/allocator.h"

namespace meshtrain::model {

namespace {
int64_t rows_of(const ModelSpec& s, const std::string& name) {
  const ParamSpec* p = s.find_or_null(name);
  return p ? p->shape[0] : 0;
}
}  // namespace

ActivationBytes activation_bytes(const ModelConfig& cfg, const ModelSpec& local, int64_t n, int64_t stream_rows,
                                 DType dtype) {
  const int64_t e = int64_t(dtype_size(dtype)), d = cfg.d_model;
  const int64_t k = cfg.norm == NormKind::LayerNorm ? 2 : 1;  // rstd (and mean) per row
  auto tensor = [&](int64_t elements) { return int64_t(CachingAllocator::rounded_size(size_t(elements * e))); };
  ActivationBytes a;
  if (local.find_or_null("model.embed_tokens.weight") && local.partition.holds(0)) a.embedding = tensor(stream_rows * d);
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    if (!local.find_or_null(p + ".input_layernorm.weight")) continue;
    const int64_t q = rows_of(local, p + ".self_attn.q_proj.weight"), kv = rows_of(local, p + ".self_attn.k_proj.weight");
    const bool swiglu = cfg.mlp == MlpKind::SwiGLU;
    const int64_t f = rows_of(local, p + (swiglu ? ".mlp.gate_proj.weight" : ".mlp.fc_in.weight"));
    a.per_block = 2 * tensor(n * d)                      // normed inputs of the column-parallel layers
                  + 2 * tensor(stream_rows * d)          // h and the block output
                  + 2 * k * tensor(stream_rows)          // norm statistics
                  + 2 * tensor(n * q) + 2 * tensor(n * kv)  // q, attention output; k, v
                  + tensor(n * (q / cfg.head_dim))       // log-sum-exp per query head
                  + (swiglu ? 3 : 2) * tensor(n * f);    // gate/pre-activation, (up,) activation
    break;
  }
  const int64_t vocab = cfg.tied_embeddings ? rows_of(local, "model.embed_tokens.weight")
                                            : rows_of(local, "lm_head.weight");
  if (local.find_or_null("model.norm.weight"))
    a.head = k * tensor(stream_rows) + tensor(n * d) + tensor(n * vocab);
  return a;
}

}  // namespace meshtrain::model
