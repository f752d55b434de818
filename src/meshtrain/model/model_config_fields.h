// Every ModelConfig field, once: its key (TOML under [model], checkpoint
// JSON), a one-line description, and its name in a Hugging Face config.json
// (Llama, GPT-2 and Mixtral-only spellings; none where HF does not carry it).
// Reading TOML (train/train_config.cc), checkpoint JSON
// (checkpoint/model_config_json.cc), HF config (checkpoint/hf_format.cc) and
// the key reference docs/config.md all walk this list, so a new field is one
// line here plus its member.
#pragma once

#include "meshtrain/model/model_config.h"

namespace meshtrain::model {

struct FieldInfo {
  const char* key;
  const char* doc;
  const char* hf_llama = nullptr;    // LlamaForCausalLM and MixtralForCausalLM config.json key
  const char* hf_gpt2 = nullptr;     // GPT2LMHeadModel config.json key
  const char* hf_mixtral = nullptr;  // MixtralForCausalLM only
};

// Calls v(info, member) for each field of `c` (ModelConfig or const
// ModelConfig), in the order docs and files list them. Members are int64_t,
// uint64_t, double, bool, std::vector<int64_t> or an enum with EnumNames.
template <typename Config, typename Visitor>
void for_each_model_field(Config& c, Visitor&& v) {
  v(FieldInfo{"vocab_size", "rows of the token embedding and the LM head (at least the tokenizer's ids)", "vocab_size",
              "vocab_size"},
    c.vocab_size);
  v(FieldInfo{"d_model", "width of the residual stream", "hidden_size", "n_embd"}, c.d_model);
  v(FieldInfo{"n_layers", "transformer blocks", "num_hidden_layers", "n_layer"}, c.n_layers);
  v(FieldInfo{"n_heads", "query heads", "num_attention_heads", "n_head"}, c.n_heads);
  v(FieldInfo{"n_kv_heads", "key/value heads (grouped-query attention; divides n_heads)", "num_key_value_heads"},
    c.n_kv_heads);
  v(FieldInfo{"head_dim", "width of one head; 0: d_model / n_heads", "head_dim"}, c.head_dim);
  v(FieldInfo{"ffn_hidden", "feed-forward hidden units (each expert's); 0: 8/3 d rounded up to 64 for SwiGLU, 4 d for GELU",
              "intermediate_size", "n_inner"},
    c.ffn_hidden);
  v(FieldInfo{"max_seq_len", "longest sequence (learned positions' rows; data.seq_len must fit)",
              "max_position_embeddings", "n_positions"},
    c.max_seq_len);
  v(FieldInfo{"norm", "normalization: rmsnorm or layernorm"}, c.norm);
  v(FieldInfo{"norm_eps", "epsilon inside the normalization", "rms_norm_eps", "layer_norm_epsilon"}, c.norm_eps);
  v(FieldInfo{"positions", "positions: rope (rotary, rotate-half) or learned (an embedding table)"}, c.positions);
  v(FieldInfo{"rope_theta", "RoPE base frequency", "rope_theta"}, c.rope_theta);
  v(FieldInfo{"mlp", "feed-forward: swiglu (gate, up, down) or gelu (tanh GELU, fc_in, fc_out)"}, c.mlp);
  v(FieldInfo{"tied_embeddings", "the LM head reuses the token embedding", "tie_word_embeddings"}, c.tied_embeddings);
  v(FieldInfo{"bias", "biases on every linear layer and LayerNorm", "attention_bias"}, c.bias);
  v(FieldInfo{"init_std", "standard deviation of the initial weights (output projections scaled by 1/sqrt(2 L))"},
    c.init_std);
  v(FieldInfo{"seed", "seed of the initial weights"}, c.seed);
  v(FieldInfo{"n_experts", "routed experts per mixture-of-experts block; 0: every block dense (docs/moe.md)",
              nullptr, nullptr, "num_local_experts"},
    c.n_experts);
  v(FieldInfo{"experts_top_k", "experts each token is routed to", nullptr, nullptr, "num_experts_per_tok"}, c.experts_top_k);
  v(FieldInfo{"moe_layers", "indices of the mixture-of-experts blocks; empty: every block"}, c.moe_layers);
  v(FieldInfo{"moe_capacity_factor", "tokens an expert takes per row: ceil(f * seq * k / E); 0: dropless"},
    c.moe_capacity_factor);
  v(FieldInfo{"moe_aux_loss_coeff", "weight of the load-balancing loss", nullptr, nullptr, "router_aux_loss_coef"}, c.moe_aux_loss_coeff);
  v(FieldInfo{"moe_shared_expert", "a dense feed-forward every token also takes"}, c.moe_shared_expert);
  v(FieldInfo{"moe_renormalize",
              "gates divided by the sum of the token's top-k probabilities (Mixtral's rule); false: the probabilities"},
    c.moe_renormalize);
  v(FieldInfo{"moe_force_balance",
              "routing replaced by the balanced round robin `meshtrain plan` assumes: for benchmarks and for checking "
              "the plan against a run, never for training a model"},
    c.moe_force_balance);
}

}  // namespace meshtrain::model
