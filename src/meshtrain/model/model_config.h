// Decoder-only transformer configuration. Llama-style by default (RMSNorm,
// RoPE, SwiGLU, GQA, untied head, no bias); GPT-2-style options (LayerNorm,
// learned positions, GELU MLP, tied embeddings, biases).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::model {

enum class NormKind { RMSNorm, LayerNorm };
enum class PositionKind { Rope, Learned };
enum class MlpKind { SwiGLU, Gelu };

struct ModelConfig {
  int64_t vocab_size = 259;
  int64_t d_model = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 4;
  int64_t head_dim = 0;  // 0: d_model / n_heads
  int64_t ffn_hidden = 0;  // 0: SwiGLU 8/3 d rounded up to 64, GELU 4 d
  int64_t max_seq_len = 256;
  NormKind norm = NormKind::RMSNorm;
  double norm_eps = 1e-5;
  PositionKind positions = PositionKind::Rope;
  double rope_theta = 10000.0;
  MlpKind mlp = MlpKind::SwiGLU;
  bool tied_embeddings = false;
  bool bias = false;
  double init_std = 0.02;
  uint64_t seed = 1234;

  // Mixture of experts (docs/moe.md). n_experts = 0: every block has a dense
  // feed-forward. Otherwise the blocks in moe_layers (empty: all) route each
  // token to experts_top_k of n_experts feed-forwards of ffn_hidden units.
  int64_t n_experts = 0;
  int64_t experts_top_k = 2;
  std::vector<int64_t> moe_layers;   // block indices; empty: every block
  double moe_capacity_factor = 0.0;  // 0: dropless; else capacity per row = ceil(f * seq * k / E)
  double moe_aux_loss_coeff = 0.01;  // load-balancing loss weight (Switch form, per row)
  bool moe_shared_expert = false;    // a dense feed-forward every token also takes
  bool moe_renormalize = false;      // gates over the top-k probability sum (Mixtral's rule)
  // Routing replaced by the balanced round robin the planner assumes
  // (kernels/moe_routing.h balanced_routing): for benchmarks and for checking
  // `meshtrain plan` against a run, never for training a model.
  bool moe_force_balance = false;
  static constexpr int64_t kMaxExperts = 4096;         // per MoE block
  static constexpr int64_t kMaxModelExperts = 65536;   // n_experts x MoE blocks
  static constexpr double kMaxAuxLossCoeff = 100.0;

  bool is_moe_layer(int64_t layer) const;

  // Fills derived values (head_dim, ffn_hidden) and throws ConfigError with
  // the key path for an impossible shape.
  void finalize();
  void finalize_moe();  // the MoE keys' checks (part of finalize)
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  std::string describe() const;
};

const char* to_string(NormKind k);
const char* to_string(PositionKind k);
const char* to_string(MlpKind k);

// Each enum's names, in declaration order (what configs and checkpoints spell).
template <typename E>
struct EnumNames;
template <>
struct EnumNames<NormKind> {
  static constexpr std::pair<const char*, NormKind> list[] = {{"rmsnorm", NormKind::RMSNorm},
                                                              {"layernorm", NormKind::LayerNorm}};
};
template <>
struct EnumNames<PositionKind> {
  static constexpr std::pair<const char*, PositionKind> list[] = {{"rope", PositionKind::Rope},
                                                                  {"learned", PositionKind::Learned}};
};
template <>
struct EnumNames<MlpKind> {
  static constexpr std::pair<const char*, MlpKind> list[] = {{"swiglu", MlpKind::SwiGLU}, {"gelu", MlpKind::Gelu}};
};

}  // namespace meshtrain::model
