#include "meshtrain/checkpoint/hf_format.h"

#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::checkpoint {

using nlohmann::json;
using model::ModelConfig;

const char* to_string(HfArch a) { return a == HfArch::Llama ? "LlamaForCausalLM" : "GPT2LMHeadModel"; }

namespace {
ModelConfig finalized(ModelConfig c) {
  c.finalize();
  return c;
}
}  // namespace

HfArch hf_arch_for(const ModelConfig& cfg) {
  using namespace model;
  const ModelConfig c = finalized(cfg);
  MT_REQUIRE(CheckpointError, c.n_experts == 0, "export: model (", c.describe(),
             ") has mixture-of-experts blocks; Hugging Face export covers dense Llama and GPT-2 models only");
  if (c.norm == NormKind::RMSNorm && c.positions == PositionKind::Rope && c.mlp == MlpKind::SwiGLU) return HfArch::Llama;
  std::string gpt2_diff;
  auto need = [&](bool ok, const char* what) {
    if (!ok) gpt2_diff += std::string(gpt2_diff.empty() ? "" : ", ") + what;
  };
  need(c.norm == NormKind::LayerNorm, "norm = layernorm");
  need(c.positions == PositionKind::Learned, "positions = learned");
  need(c.mlp == MlpKind::Gelu, "mlp = gelu");
  need(c.tied_embeddings, "tied_embeddings = true");
  need(c.bias, "bias = true");
  need(c.n_kv_heads == c.n_heads, "n_kv_heads == n_heads");
  need(c.head_dim * c.n_heads == c.d_model, "head_dim * n_heads == d_model");
  if (gpt2_diff.empty()) return HfArch::Gpt2;
  MT_THROW(CheckpointError, "export: model (", c.describe(),
           ") matches no Hugging Face architecture: LlamaForCausalLM needs rmsnorm + rope + swiglu; "
           "GPT2LMHeadModel additionally needs ",
           gpt2_diff);
}

json hf_config_json(const ModelConfig& cfg) {
  const ModelConfig c = finalized(cfg);
  if (hf_arch_for(c) == HfArch::Llama) {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.d_model},
            {"intermediate_size", c.ffn_hidden},
            {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads},
            {"num_key_value_heads", c.n_kv_heads},
            {"head_dim", c.head_dim},
            {"hidden_act", "silu"},
            {"rms_norm_eps", c.norm_eps},
            {"rope_theta", c.rope_theta},
            {"rope_scaling", nullptr},
            {"max_position_embeddings", c.max_seq_len},
            {"tie_word_embeddings", c.tied_embeddings},
            {"attention_bias", c.bias},
            {"mlp_bias", c.bias},
            {"torch_dtype", "float32"}};
  }
  json j = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", c.vocab_size},
            {"n_embd", c.d_model},
            {"n_layer", c.n_layers},
            {"n_head", c.n_heads},
            {"n_positions", c.max_seq_len},
            {"n_ctx", c.max_seq_len},
            {"n_inner", c.ffn_hidden == 4 * c.d_model ? json(nullptr) : json(c.ffn_hidden)},
            {"layer_norm_epsilon", c.norm_eps},
            {"activation_function", "gelu_new"},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
  return j;
}

namespace {

int64_t get_int(const json& j, const char* key, const std::string& arch) {
  MT_REQUIRE(CheckpointError, j.contains(key) && j[key].is_number_integer(), arch, " config.json: '", key,
             "' missing or not an integer");
  return j[key].get<int64_t>();
}

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    MT_THROW(CheckpointError, "config.json: '", key, "' has the wrong type");
  }
}

bool is_arch(const json& j, const char* arch, const char* model_type) {
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a == arch) return true;
  return j.value("model_type", "") == model_type;
}

// [out, in] -> [in, out]
std::vector<float> transpose(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<float> t(w.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = w[size_t(r * cols + c)];
  return t;
}

// One mapping entry: our tensor <-> HF tensor, optionally transposed.
struct Rename {
  std::string ours, hf;
  bool transposed;
};

std::vector<Rename> gpt2_renames(const ModelConfig& c) {
  std::vector<Rename> r = {{"model.embed_tokens.weight", "transformer.wte.weight", false},
                           {"model.embed_positions.weight", "transformer.wpe.weight", false},
                           {"model.norm.weight", "transformer.ln_f.weight", false},
                           {"model.norm.bias", "transformer.ln_f.bias", false}};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string o = "model.layers." + std::to_string(l), h = "transformer.h." + std::to_string(l);
    for (const char* s : {".weight", ".bias"}) {
      r.push_back({o + ".input_layernorm" + s, h + ".ln_1" + s, false});
      r.push_back({o + ".post_attention_layernorm" + s, h + ".ln_2" + s, false});
      r.push_back({o + ".self_attn.o_proj" + s, h + ".attn.c_proj" + s, s[1] == 'w'});
      r.push_back({o + ".mlp.fc_in" + s, h + ".mlp.c_fc" + s, s[1] == 'w'});
      r.push_back({o + ".mlp.fc_out" + s, h + ".mlp.c_proj" + s, s[1] == 'w'});
    }
  }
  return r;
}

const std::vector<float>& need(const ParamValues& p, const std::string& name) {
  auto it = p.find(name);
  MT_REQUIRE(CheckpointError, it != p.end(), "export: parameter '", name, "' missing");
  return it->second;
}

}  // namespace

ModelConfig model_config_from_hf(const json& j) {
  MT_REQUIRE(CheckpointError, j.is_object(), "config.json is not a JSON object");
  ModelConfig c;
  if (is_arch(j, "LlamaForCausalLM", "llama")) {
    const std::string a = "LlamaForCausalLM";
    c.vocab_size = get_int(j, "vocab_size", a);
    c.d_model = get_int(j, "hidden_size", a);
    c.ffn_hidden = get_int(j, "intermediate_size", a);
    c.n_layers = get_int(j, "num_hidden_layers", a);
    c.n_heads = get_int(j, "num_attention_heads", a);
    c.n_kv_heads = get_or<int64_t>(j, "num_key_value_heads", c.n_heads);
    c.head_dim = get_or<int64_t>(j, "head_dim", 0);
    c.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6);
    c.rope_theta = get_or<double>(j, "rope_theta", 10000.0);
    c.max_seq_len = get_int(j, "max_position_embeddings", a);
    c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
    const bool attn_bias = get_or<bool>(j, "attention_bias", false), mlp_bias = get_or<bool>(j, "mlp_bias", false);
    MT_REQUIRE(CheckpointError, attn_bias == mlp_bias,
               "config.json: attention_bias != mlp_bias is not supported (one 'bias' switch)");
    c.bias = attn_bias;
    MT_REQUIRE(CheckpointError, get_or<std::string>(j, "hidden_act", "silu") == "silu",
               "config.json: hidden_act must be silu for SwiGLU");
    MT_REQUIRE(CheckpointError, !j.contains("rope_scaling") || j["rope_scaling"].is_null(),
               "config.json: rope_scaling is not supported");
  } else if (is_arch(j, "GPT2LMHeadModel", "gpt2")) {
    const std::string a = "GPT2LMHeadModel";
    c.norm = model::NormKind::LayerNorm;
    c.positions = model::PositionKind::Learned;
    c.mlp = model::MlpKind::Gelu;
    c.tied_embeddings = true;
    c.bias = true;
    c.vocab_size = get_int(j, "vocab_size", a);
    c.d_model = get_int(j, "n_embd", a);
    c.n_layers = get_int(j, "n_layer", a);
    c.n_heads = c.n_kv_heads = get_int(j, "n_head", a);
    c.max_seq_len = get_int(j, "n_positions", a);
    c.ffn_hidden = get_or<int64_t>(j, "n_inner", 4 * c.d_model);
    c.norm_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5);
    const std::string act = get_or<std::string>(j, "activation_function", "gelu_new");
    MT_REQUIRE(CheckpointError, act == "gelu_new" || act == "gelu_pytorch_tanh",
               "config.json: activation_function '", act, "' is not the tanh GELU this model implements");
  } else {
    MT_THROW(CheckpointError, "config.json: architecture is neither LlamaForCausalLM nor GPT2LMHeadModel");
  }
  try {
    c.finalize();
  } catch (const ConfigError& e) {
    throw CheckpointError(std::string("config.json describes an invalid model: ") + e.what());
  }
  return c;
}

std::vector<NamedTensor> to_hf_tensors(const ModelConfig& cfg, const ParamValues& params) {
  const ModelConfig c = finalized(cfg);
  const model::ModelSpec spec = model::build_model_spec(c);
  std::vector<NamedTensor> out;
  if (hf_arch_for(c) == HfArch::Llama) {
    for (const auto& p : spec.params) out.push_back({p.name, p.shape, need(params, p.name)});
    return out;
  }
  for (const Rename& r : gpt2_renames(c)) {
    const model::ParamSpec& p = spec.find(r.ours);
    const auto& v = need(params, r.ours);
    if (r.transposed) out.push_back({r.hf, Shape{p.shape[1], p.shape[0]}, transpose(v, p.shape[0], p.shape[1])});
    else out.push_back({r.hf, p.shape, v});
  }
  const int64_t d = c.d_model;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string o = "model.layers." + std::to_string(l) + ".self_attn.";
    const std::string h = "transformer.h." + std::to_string(l) + ".attn.c_attn.";
    std::vector<float> w, b;  // rows q | k | v of [3d, d], then transposed
    for (const char* x : {"q_proj", "k_proj", "v_proj"}) {
      const auto& wx = need(params, o + x + ".weight");
      const auto& bx = need(params, o + x + ".bias");
      w.insert(w.end(), wx.begin(), wx.end());
      b.insert(b.end(), bx.begin(), bx.end());
    }
    out.push_back({h + "weight", Shape{d, 3 * d}, transpose(w, 3 * d, d)});
    out.push_back({h + "bias", Shape{3 * d}, std::move(b)});
  }
  return out;
}

ParamValues from_hf_tensors(const ModelConfig& cfg, const std::map<std::string, NamedTensor>& tensors) {
  const ModelConfig c = finalized(cfg);
  const model::ModelSpec spec = model::build_model_spec(c);
  std::set<std::string> used;
  auto fetch = [&](const std::string& name, const Shape& shape) -> const std::vector<float>& {
    auto it = tensors.find(name);
    MT_REQUIRE(CheckpointError, it != tensors.end(), "import: tensor '", name, "' missing");
    MT_REQUIRE(CheckpointError, it->second.shape == shape, "import: tensor '", name, "' has shape ",
               it->second.shape.str(), ", the config needs ", shape.str());
    used.insert(name);
    return it->second.values;
  };
  ParamValues out;
  if (hf_arch_for(c) == HfArch::Llama) {
    for (const auto& p : spec.params) out[p.name] = fetch(p.name, p.shape);
  } else {
    for (const Rename& r : gpt2_renames(c)) {
      const model::ParamSpec& p = spec.find(r.ours);
      if (r.transposed) out[r.ours] = transpose(fetch(r.hf, Shape{p.shape[1], p.shape[0]}), p.shape[1], p.shape[0]);
      else out[r.ours] = fetch(r.hf, p.shape);
    }
    const int64_t d = c.d_model;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string o = "model.layers." + std::to_string(l) + ".self_attn.";
      const std::string h = "transformer.h." + std::to_string(l) + ".attn.c_attn.";
      const std::vector<float> w = transpose(fetch(h + "weight", Shape{d, 3 * d}), d, 3 * d);  // [3d, d]
      const std::vector<float>& b = fetch(h + "bias", Shape{3 * d});
      const char* parts[] = {"q_proj", "k_proj", "v_proj"};
      for (int k = 0; k < 3; ++k) {
        out[o + parts[k] + ".weight"].assign(w.begin() + k * d * d, w.begin() + (k + 1) * d * d);
        out[o + parts[k] + ".bias"].assign(b.begin() + k * d, b.begin() + (k + 1) * d);
      }
    }
  }
  for (const auto& [name, t] : tensors) {
    if (used.count(name)) continue;
    // Buffers some HF checkpoints carry: causal masks and RoPE frequencies.
    const bool ignorable = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
                           name.ends_with("rotary_emb.inv_freq") ||
                           (name == "lm_head.weight" && c.tied_embeddings);
    MT_REQUIRE(CheckpointError, ignorable, "import: unexpected tensor '", name, "' for a ", to_string(hf_arch_for(c)),
               " with this config");
  }
  return out;
}

}  // namespace meshtrain::checkpoint
