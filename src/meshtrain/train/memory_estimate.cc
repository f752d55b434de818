#include "meshtrain/train/memory_estimate.h"

#include <algorithm>
#include <utility>

#include "meshtrain/core/memory_tracker.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {
namespace {

constexpr int64_t kCap = int64_t(1) << 62;

// Saturating arithmetic: a huge config must yield a huge estimate, not a
// wrapped small one.
int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > kCap) ? kCap : r;
}
int64_t add(int64_t a, int64_t b) { return std::min(kCap, a + b); }

}  // namespace

std::string MemoryEstimate::str() const {
  std::string out;
  for (const auto& [name, bytes] : {std::pair<const char*, int64_t>{"params", params}, {"grads", grads},
                                    {"optimizer", optimizer}, {"activations", activations}, {"workspace", workspace}})
    if (bytes > 0) out += (out.empty() ? "" : ", ") + std::string(name) + " " + format_bytes(bytes);
  return out + " = " + format_bytes(total());
}

MemoryEstimate estimate_rank_memory(const TrainConfig& cfg, int dp) {
  const auto& m = cfg.model;
  // ZeRO shards over dp x cp; a rank computes seq / cp positions of each row.
  const int64_t cp = std::max(1, cfg.parallel.cp), R = std::max(1, dp) * cp, f32 = 4;
  const model::ModelSpec spec = model::build_model_spec(m);
  // Routed experts: a rank holds 1/ep of them, sharded over the ep-times-
  // smaller expert-data-parallel group: 1/R of them either way once sharded.
  const int64_t ep = std::max(1, cfg.parallel.ep);
  int64_t dense = 0, experts = 0, largest_unit = 0;
  for (const auto& u : spec.units) {
    if (u.experts)
      experts = add(experts, u.numel);
    else
      dense = add(dense, u.numel);
    largest_unit = std::max(largest_unit, u.experts ? (u.numel + ep - 1) / ep : u.numel);
  }
  // Tensor and pipeline parallelism split the weights over tp x pp ranks
  // (evenly up to the embedding and head, which the estimate spreads too).
  const int64_t tp = std::max(1, cfg.parallel.tp), model_split = mul(tp, std::max(1, cfg.parallel.pp));
  const int64_t held = (add(dense, (experts + ep - 1) / ep) + model_split - 1) / model_split;
  const int64_t shard = (add(dense, experts) + mul(R, model_split) - 1) / mul(R, model_split);
  largest_unit = (largest_unit + tp - 1) / tp;
  MemoryEstimate e;
  const int stage = cfg.parallel.zero_stage;
  // docs/math.md (M.26), stage 0: P + G + O; 1: O/R; 2: (G + O)/R; 3: (P + G + O)/R.
  // Under accumulation (G > 1) stages 2 and 3 keep unit gradients whole for the window.
  const bool window_grads = cfg.training.grad_accum > 1;
  e.params = mul(stage >= 3 ? shard : held, f32);
  e.grads = mul(stage >= 2 && !window_grads ? shard : held, f32);
  e.optimizer = mul(stage >= 1 ? shard : held, 2 * f32);  // AdamW: m and v

  // Saved per token and layer (f32): block input and norm output for both
  // sub-blocks, q/k/v and their rotated copies, the attention output and
  // softmax statistics, the MLP's hidden tensors (heads and hidden units
  // split over tp). A pipeline's first stage holds up to pp micro-batches of
  // its 1/pp of the layers under 1F1B: about the unsplit model's.
  const int64_t d = m.d_model, q = mul(m.n_heads, m.head_dim) / tp, kv = std::max<int64_t>(m.head_dim, mul(m.n_kv_heads, m.head_dim) / tp);
  const int64_t mlp = mul(m.ffn_hidden, m.mlp == model::MlpKind::SwiGLU ? 3 : 2) / tp;
  const int64_t attention = add(add(mul(4, d), add(mul(3, q), mul(3, kv))), mul(2, m.n_heads) / tp);
  const int64_t per_layer = add(attention, mlp);
  // A MoE block (docs/moe.md) runs top_k experts per token in blocks padded
  // by up to 25%, each saving an expert's hidden tensors and its input and
  // output rows, plus the shared expert and the router's logits and
  // probabilities (f32 and double: 3 words per expert).
  const int64_t moe_blocks = m.n_experts == 0 ? 0 : m.moe_layers.empty() ? m.n_layers : int64_t(m.moe_layers.size());
  const int64_t expert_slot = add(mlp, mul(2, d));
  const int64_t per_moe_layer =
      add(add(attention, mul(3, m.n_experts)),
          add(add(mul(m.experts_top_k, expert_slot), mul(m.experts_top_k, expert_slot) / 4), m.moe_shared_expert ? mlp : 0));
  const int64_t largest_layer = moe_blocks > 0 ? std::max(per_layer, per_moe_layer) : per_layer;
  const int64_t tokens = mul(cfg.training.micro_batch, cfg.data.seq_len) / cp;
  const int64_t all_layers = add(mul(m.n_layers - moe_blocks, per_layer), mul(moe_blocks, per_moe_layer));
  const int64_t saved = cfg.training.recompute ? add(mul(m.n_layers, d), largest_layer) : all_layers;
  // + the logits and their gradient, and one layer's activation gradients in backward.
  e.activations = mul(mul(tokens, add(add(saved, mul(2, m.vocab_size) / tp), largest_layer)), f32);

  int64_t work = mul(mul(m.max_seq_len, m.head_dim), f32);                   // RoPE cos/sin table
  if (stage >= 3) work = add(work, mul(mul(2, largest_unit), f32));          // gathered + prefetched unit
  if (stage >= 2) work = add(work, mul(largest_unit, f32));                  // a unit's transient full gradient
  if (stage == 0) work = add(work, mul(int64_t(cfg.parallel.bucket_mb * 1024 * 1024), 2));  // bucket staging
  e.workspace = work;
  return e;
}

MemoryEstimate estimate_model_memory(const model::ModelConfig& model, int64_t rows, int64_t seq_len) {
  TrainConfig cfg;
  cfg.model = model;
  cfg.training.micro_batch = rows;
  cfg.data.seq_len = seq_len;
  MemoryEstimate e = estimate_rank_memory(cfg, 1);
  e.optimizer = 0;  // no optimizer state
  return e;
}

namespace {

std::string describe(const MemoryEstimate& per_rank, int ranks, int64_t need) {
  return "estimated memory per rank: " + per_rank.str() +
         (ranks > 1 ? "; x " + std::to_string(ranks) + " ranks here = " + format_bytes(need) : "");
}

}  // namespace

void check_available_memory(const MemoryEstimate& per_rank, int ranks, std::FILE* console, const std::string& remedy) {
  const int64_t need = mul(per_rank.total(), std::max(1, ranks));
  meshtrain::check_available_memory(need, describe(per_rank, ranks, need), console, remedy);
}

std::string check_memory_budget(const MemoryEstimate& per_rank, int ranks, const AvailableMemory& available,
                                const std::string& remedy) {
  const int64_t need = mul(per_rank.total(), std::max(1, ranks));
  return meshtrain::check_memory_budget(need, describe(per_rank, ranks, need), available, remedy);
}

}  // namespace meshtrain::train
