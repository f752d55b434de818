#include "meshtrain/checkpoint/model_config_json.h"

#include <set>

#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

using nlohmann::json;
using model::ModelConfig;

json model_config_to_json(const ModelConfig& c) {
  return {{"vocab_size", c.vocab_size},
          {"d_model", c.d_model},
          {"n_layers", c.n_layers},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},
          {"ffn_hidden", c.ffn_hidden},
          {"max_seq_len", c.max_seq_len},
          {"norm", model::to_string(c.norm)},
          {"norm_eps", c.norm_eps},
          {"positions", model::to_string(c.positions)},
          {"rope_theta", c.rope_theta},
          {"mlp", model::to_string(c.mlp)},
          {"tied_embeddings", c.tied_embeddings},
          {"bias", c.bias},
          {"init_std", c.init_std},
          {"seed", c.seed},
          {"n_experts", c.n_experts},
          {"experts_top_k", c.experts_top_k},
          {"moe_layers", c.moe_layers},
          {"moe_capacity_factor", c.moe_capacity_factor},
          {"moe_aux_loss_coeff", c.moe_aux_loss_coeff},
          {"moe_shared_expert", c.moe_shared_expert},
          {"moe_force_balance", c.moe_force_balance}};
}

namespace {

template <typename T>
void take(const json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      MT_REQUIRE(CheckpointError, it->is_number_integer(), "model config: '", key, "' is not an integer");
    }
    if constexpr (std::is_same_v<T, bool>) {
      MT_REQUIRE(CheckpointError, it->is_boolean(), "model config: '", key, "' is not a boolean");
    }
    out = it->get<T>();
  } catch (const json::exception& e) {
    MT_THROW(CheckpointError, "model config: '", key, "' has the wrong type: ", e.what());
  }
}

template <typename E>
void take_enum(const json& j, const char* key, E& out, E a, E b) {
  auto it = j.find(key);
  if (it == j.end()) return;
  MT_REQUIRE(CheckpointError, it->is_string(), "model config: '", key, "' is not a string");
  const std::string s = it->get<std::string>();
  if (s == model::to_string(a)) out = a;
  else if (s == model::to_string(b)) out = b;
  else MT_THROW(CheckpointError, "model config: '", key, "' = '", s, "' (expected ", model::to_string(a), " or ",
                model::to_string(b), ")");
}

}  // namespace

ModelConfig model_config_from_json(const json& j) {
  MT_REQUIRE(CheckpointError, j.is_object(), "model config is not a JSON object");
  const json known = model_config_to_json(ModelConfig{});
  for (const auto& [k, v] : j.items())
    MT_REQUIRE(CheckpointError, known.contains(k), "model config: unknown key '", k, "'");
  ModelConfig c;
  take(j, "vocab_size", c.vocab_size);
  take(j, "d_model", c.d_model);
  take(j, "n_layers", c.n_layers);
  take(j, "n_heads", c.n_heads);
  take(j, "n_kv_heads", c.n_kv_heads);
  take(j, "head_dim", c.head_dim);
  take(j, "ffn_hidden", c.ffn_hidden);
  take(j, "max_seq_len", c.max_seq_len);
  take_enum(j, "norm", c.norm, model::NormKind::RMSNorm, model::NormKind::LayerNorm);
  take(j, "norm_eps", c.norm_eps);
  take_enum(j, "positions", c.positions, model::PositionKind::Rope, model::PositionKind::Learned);
  take(j, "rope_theta", c.rope_theta);
  take_enum(j, "mlp", c.mlp, model::MlpKind::SwiGLU, model::MlpKind::Gelu);
  take(j, "tied_embeddings", c.tied_embeddings);
  take(j, "bias", c.bias);
  take(j, "init_std", c.init_std);
  take(j, "seed", c.seed);
  take(j, "n_experts", c.n_experts);
  take(j, "experts_top_k", c.experts_top_k);
  take(j, "moe_layers", c.moe_layers);
  take(j, "moe_capacity_factor", c.moe_capacity_factor);
  take(j, "moe_aux_loss_coeff", c.moe_aux_loss_coeff);
  take(j, "moe_shared_expert", c.moe_shared_expert);
  take(j, "moe_force_balance", c.moe_force_balance);
  try {
    c.finalize();
  } catch (const ConfigError& e) {
    throw CheckpointError(std::string("model config in checkpoint is invalid: ") + e.what());
  }
  return c;
}

}  // namespace meshtrain::checkpoint
