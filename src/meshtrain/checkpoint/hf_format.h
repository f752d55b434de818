// Deployment format: consolidated f32 weights with Hugging Face names plus a
// HF config.json. Llama-style models export as LlamaForCausalLM (our
// ParamSpec names already are HF Llama names, RoPE is HF's rotate_half);
// GPT-2-style models (learned positions, LayerNorm, GELU, tied, bias,
// n_kv_heads == n_heads) as GPT2LMHeadModel, whose Conv1D weights are
// stored [in, out] (transposed) and whose attention q, k, v are fused into
// c_attn. Mixture-of-experts models export as MixtralForCausalLM (every
// block routed, dropless, top-k gates renormalized: model.moe_renormalize):
// a block's router is block_sparse_moe.gate and expert e's gate / down / up
// projections block_sparse_moe.experts.e.w1 / w2 / w3. Import reverses each
// mapping exactly. config.json keys come from the field table
// (model/model_config_fields.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/core/shape.h"
#include "meshtrain/model/model_config.h"

namespace meshtrain::checkpoint {

enum class HfArch { Llama, Gpt2, Mixtral };
const char* to_string(HfArch a);

// The architecture `cfg` exports as; CheckpointError saying what differs
// when it matches neither.
HfArch hf_arch_for(const model::ModelConfig& cfg);

nlohmann::json hf_config_json(const model::ModelConfig& cfg);
// Reads a LlamaForCausalLM, MixtralForCausalLM or GPT2LMHeadModel
// config.json. The fields HF does not carry (init_std, seed) keep their
// defaults; keys the file omits take HF's defaults.
model::ModelConfig model_config_from_hf(const nlohmann::json& config);

struct NamedTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
};
// Parameter values in our layout, keyed by ParamSpec name.
using ParamValues = std::map<std::string, std::vector<float>>;

std::vector<NamedTensor> to_hf_tensors(const model::ModelConfig& cfg, const ParamValues& params);
// `tensors` keyed by HF name; every expected tensor must be present with its
// shape; unknown names are an error (except buffers HF itself ignores).
ParamValues from_hf_tensors(const model::ModelConfig& cfg, const std::map<std::string, NamedTensor>& tensors);

}  // namespace meshtrain::checkpoint
