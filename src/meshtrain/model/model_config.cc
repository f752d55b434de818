#include "meshtrain/model/model_config.h"

#include <cmath>
#include <sstream>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

namespace {
template <typename E>
const char* name_of(E v) {
  for (const auto& [name, value] : EnumNames<E>::list)
    if (value == v) return name;
  return "?";
}
}  // namespace

const char* to_string(NormKind k) { return name_of(k); }
const char* to_string(PositionKind k) { return name_of(k); }
const char* to_string(MlpKind k) { return name_of(k); }

void ModelConfig::finalize() {
  auto positive = [](int64_t v, const char* key) {
    MT_REQUIRE(ConfigError, v > 0, key, " = ", v, ": expected a positive integer");
  };
  positive(vocab_size, "model.vocab_size");
  positive(d_model, "model.d_model");
  positive(n_layers, "model.n_layers");
  positive(n_heads, "model.n_heads");
  positive(n_kv_heads, "model.n_kv_heads");
  positive(max_seq_len, "model.max_seq_len");
  if (head_dim == 0) {
    MT_REQUIRE(ConfigError, d_model % n_heads == 0, "model.n_heads = ", n_heads, " does not divide model.d_model = ",
               d_model, ": choose n_heads dividing d_model or set model.head_dim");
    head_dim = d_model / n_heads;
  }
  positive(head_dim, "model.head_dim");
  MT_REQUIRE(ConfigError, n_heads % n_kv_heads == 0, "model.n_kv_heads = ", n_kv_heads,
             " does not divide model.n_heads = ", n_heads, ": each KV head must serve a whole group of query heads");
  if (positions == PositionKind::Rope)
    MT_REQUIRE(ConfigError, head_dim % 2 == 0, "model.head_dim = ", head_dim, ": RoPE needs an even head_dim");
  if (ffn_hidden == 0) {
    ffn_hidden = mlp == MlpKind::SwiGLU ? (8 * d_model / 3 + 63) / 64 * 64 : 4 * d_model;
  }
  positive(ffn_hidden, "model.ffn_hidden");
  MT_REQUIRE(ConfigError, norm_eps > 0 && norm_eps < 1, "model.norm_eps = ", norm_eps, ": expected 0 < eps < 1");
  MT_REQUIRE(ConfigError, rope_theta > 1, "model.rope_theta = ", rope_theta, ": expected > 1");
  MT_REQUIRE(ConfigError, init_std > 0, "model.init_std = ", init_std, ": expected > 0");
  MT_REQUIRE(ConfigError, vocab_size <= (int64_t(1) << 31) - 1, "model.vocab_size too large");
  finalize_moe();
}

void ModelConfig::finalize_moe() {
  MT_REQUIRE(ConfigError, n_experts >= 0, "model.n_experts = ", n_experts, ": expected >= 0 (0: dense)");
  if (n_experts == 0) {
    MT_REQUIRE(ConfigError, moe_layers.empty(), "model.moe_layers is set but model.n_experts = 0: set n_experts");
    MT_REQUIRE(ConfigError, !moe_force_balance, "model.moe_force_balance is set but model.n_experts = 0");
    return;
  }
  // Every expert is a feed-forward with parameters of its own (and entries
  // in the model spec): bounded before anything is sized from the count.
  MT_REQUIRE(ConfigError, n_experts <= kMaxExperts, "model.n_experts = ", n_experts, ": at most ", kMaxExperts,
             " experts per block are supported");
  MT_REQUIRE(ConfigError, experts_top_k >= 1 && experts_top_k <= n_experts, "model.experts_top_k = ", experts_top_k,
             ": expected 1 <= top_k <= model.n_experts = ", n_experts);
  // f >= n_experts / top_k keeps every token of a row (C >= seq): larger
  // values mean nothing more, and a capacity beyond 64 bits means nothing.
  MT_REQUIRE(ConfigError, std::isfinite(moe_capacity_factor) && moe_capacity_factor >= 0 &&
                              moe_capacity_factor <= double(n_experts),
             "model.moe_capacity_factor = ", moe_capacity_factor,
             ": expected a finite value in [0, model.n_experts = ", n_experts,
             "] (0: dropless; from n_experts / experts_top_k up no token is ever dropped)");
  MT_REQUIRE(ConfigError, std::isfinite(moe_aux_loss_coeff) && moe_aux_loss_coeff >= 0 &&
                              moe_aux_loss_coeff <= kMaxAuxLossCoeff,
             "model.moe_aux_loss_coeff = ", moe_aux_loss_coeff, ": expected a finite value in [0, ", kMaxAuxLossCoeff,
             "] (typical: 0.001 to 0.1)");
  for (size_t i = 0; i < moe_layers.size(); ++i) {
    MT_REQUIRE(ConfigError, moe_layers[i] >= 0 && moe_layers[i] < n_layers, "model.moe_layers[", i,
               "] = ", moe_layers[i], ": outside the blocks [0, model.n_layers = ", n_layers, ")");
    MT_REQUIRE(ConfigError, i == 0 || moe_layers[i] > moe_layers[i - 1], "model.moe_layers must be ascending",
               " without repeats (", moe_layers[i - 1], " then ", moe_layers[i], ")");
  }
  const int64_t moe_blocks = moe_layers.empty() ? n_layers : int64_t(moe_layers.size());
  MT_REQUIRE(ConfigError, moe_blocks <= kMaxModelExperts / n_experts, "model.n_experts x MoE blocks = ", n_experts,
             " x ", moe_blocks, ": at most ", kMaxModelExperts,
             " expert feed-forwards per model are supported (fewer experts, or fewer blocks in model.moe_layers)");
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (n_experts == 0) return false;
  if (moe_layers.empty()) return true;
  for (int64_t l : moe_layers)
    if (l == layer) return true;
  return false;
}

std::string ModelConfig::describe() const {
  std::ostringstream os;
  os << "d_model=" << d_model << " layers=" << n_layers << " heads=" << n_heads << "/" << n_kv_heads
     << " head_dim=" << head_dim << " ffn=" << ffn_hidden << " vocab=" << vocab_size << " " << to_string(norm) << "/"
     << to_string(positions) << "/" << to_string(mlp) << (tied_embeddings ? " tied" : " untied")
     << (bias ? " bias" : "");
  if (n_experts > 0) {
    os << " moe=" << n_experts << "x top" << experts_top_k << " cf=" << moe_capacity_factor
       << (moe_shared_expert ? " +shared" : "") << (moe_renormalize ? " renormalized" : "");
  }
  return os.str();
}

}  // namespace meshtrain::model
