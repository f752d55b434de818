#include "meshtrain/checkpoint/hf_format.h"

#include <map>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/model/model_config_fields.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::checkpoint {

using nlohmann::json;
using model::ModelConfig;

const char* to_string(HfArch a) {
  switch (a) {
    case HfArch::Llama: return "LlamaForCausalLM";
    case HfArch::Mixtral: return "MixtralForCausalLM";
    case HfArch::Gpt2: return "GPT2LMHeadModel";
  }
  return "?";
}

namespace {
ModelConfig finalized(ModelConfig c) {
  c.finalize();
  return c;
}
}  // namespace

namespace {

// What `c` lacks to be a MixtralForCausalLM ("" when nothing).
std::string mixtral_gaps(const ModelConfig& c) {
  using namespace model;
  std::string gaps;
  auto need = [&](bool ok, const char* what) {
    if (!ok) gaps += std::string(gaps.empty() ? "" : ", ") + what;
  };
  need(c.norm == NormKind::RMSNorm && c.positions == PositionKind::Rope && c.mlp == MlpKind::SwiGLU,
       "norm = rmsnorm, positions = rope, mlp = swiglu");
  need(!c.bias, "bias = false");
  need(c.moe_layers.empty() || int64_t(c.moe_layers.size()) == c.n_layers, "moe_layers = [] (every block)");
  need(!c.moe_shared_expert, "moe_shared_expert = false");
  need(c.moe_capacity_factor == 0, "moe_capacity_factor = 0 (dropless)");
  need(c.moe_renormalize, "moe_renormalize = true (Mixtral renormalizes the top-k gates)");
  return gaps;
}

}  // namespace

HfArch hf_arch_for(const ModelConfig& cfg) {
  using namespace model;
  const ModelConfig c = finalized(cfg);
  if (c.n_experts > 0) {
    const std::string gaps = mixtral_gaps(c);
    MT_REQUIRE(CheckpointError, gaps.empty(), "export: model (", c.describe(),
               ") has mixture-of-experts blocks but is not a MixtralForCausalLM; that needs ", gaps);
    return HfArch::Mixtral;
  }
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

namespace {

// The config.json key of field `f` for `arch` (nullptr: not carried).
const char* hf_key(const model::FieldInfo& f, HfArch arch) {
  if (arch == HfArch::Gpt2) return f.hf_gpt2;
  if (f.hf_llama) return f.hf_llama;
  return arch == HfArch::Mixtral ? f.hf_mixtral : nullptr;
}

}  // namespace

json hf_config_json(const ModelConfig& cfg) {
  const ModelConfig c = finalized(cfg);
  const HfArch arch = hf_arch_for(c);
  json j = json::object();
  model::for_each_model_field(c, [&](const model::FieldInfo& f, const auto& v) {
    if constexpr (!std::is_enum_v<std::decay_t<decltype(v)>>)
      if (const char* key = hf_key(f, arch)) j[key] = v;
  });
  j["architectures"] = {to_string(arch)};
  j["torch_dtype"] = "float32";
  if (arch == HfArch::Gpt2) {
    j["model_type"] = "gpt2";
    j["n_ctx"] = c.max_seq_len;
    if (c.ffn_hidden == 4 * c.d_model) j["n_inner"] = nullptr;
    j["activation_function"] = "gelu_new";
    j["tie_word_embeddings"] = true;
    return j;
  }
  j["model_type"] = arch == HfArch::Mixtral ? "mixtral" : "llama";
  j["hidden_act"] = "silu";
  j["rope_scaling"] = nullptr;
  if (arch == HfArch::Mixtral) {
    j.erase("attention_bias");
    j["output_router_logits"] = false;
    j["sliding_window"] = nullptr;
  } else {
    j["mlp_bias"] = c.bias;  // one switch in this model, two keys in HF's
  }
  return j;
}

namespace {

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

// Our ParamSpec names are HF Llama names; Mixtral names a block's router and
// experts its own way.
std::string llama_family_name(const std::string& ours, HfArch arch) {
  if (arch != HfArch::Mixtral) return ours;
  auto swap = [](std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    return at == std::string::npos ? s : s.replace(at, from.size(), to);
  };
  std::string n = swap(ours, ".mlp.router.", ".block_sparse_moe.gate.");
  if (n.find(".mlp.experts.") == std::string::npos) return n;
  n = swap(n, ".mlp.experts.", ".block_sparse_moe.experts.");
  n = swap(n, ".gate_proj.", ".w1.");
  n = swap(n, ".down_proj.", ".w2.");
  return swap(n, ".up_proj.", ".w3.");
}

const std::vector<float>& need(const ParamValues& p, const std::string& name) {
  auto it = p.find(name);
  MT_REQUIRE(CheckpointError, it != p.end(), "export: parameter '", name, "' missing");
  return it->second;
}

}  // namespace

namespace {

// Reads every table field `arch` carries; the keys read are added to `seen`.
// `names` maps each field carried to its config.json key.
void read_hf_fields(const json& j, HfArch arch, ModelConfig& c, std::set<std::string>& seen,
                    std::map<std::string, std::string>& names) {
  model::for_each_model_field(c, [&](const model::FieldInfo& f, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (!std::is_enum_v<T>) {
      const char* key = hf_key(f, arch);
      if (key) names[f.key] = key;
      if (!key || !j.contains(key) || j[key].is_null()) return;
      const json& x = j[key];
      const bool ok = std::is_same_v<T, bool>             ? x.is_boolean()
                      : std::is_floating_point_v<T>       ? x.is_number()
                      : std::is_integral_v<T>             ? x.is_number_integer()
                                                          : x.is_array();
      MT_REQUIRE(CheckpointError, ok, to_string(arch), " config.json: '", key, "' has the wrong type (", x.dump(), ")");
      v = x.get<T>();
      seen.insert(f.key);
    }
  });
}

}  // namespace

ModelConfig model_config_from_hf(const json& j) {
  MT_REQUIRE(CheckpointError, j.is_object(), "config.json is not a JSON object");
  ModelConfig c;
  HfArch arch;
  if (is_arch(j, "MixtralForCausalLM", "mixtral")) arch = HfArch::Mixtral;
  else if (is_arch(j, "LlamaForCausalLM", "llama")) arch = HfArch::Llama;
  else if (is_arch(j, "GPT2LMHeadModel", "gpt2")) arch = HfArch::Gpt2;
  else MT_THROW(CheckpointError, "config.json: architecture is none of LlamaForCausalLM, MixtralForCausalLM, GPT2LMHeadModel");
  const std::string a = to_string(arch);
  std::vector<const char*> required = {"vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"};
  if (arch == HfArch::Gpt2) {
    c.norm = model::NormKind::LayerNorm;
    c.positions = model::PositionKind::Learned;
    c.mlp = model::MlpKind::Gelu;
    c.tied_embeddings = true;
    c.bias = true;
    const std::string act = get_or<std::string>(j, "activation_function", "gelu_new");
    MT_REQUIRE(CheckpointError, act == "gelu_new" || act == "gelu_pytorch_tanh",
               "config.json: activation_function '", act, "' is not the tanh GELU this model implements");
  } else {
    required.push_back("ffn_hidden");
    c.norm_eps = 1e-6;  // HF's defaults where the file is silent
    if (arch == HfArch::Mixtral) {
      c.n_experts = 8;
      c.moe_aux_loss_coeff = 0.001;
      c.moe_renormalize = true;
    }
    MT_REQUIRE(CheckpointError, get_or<std::string>(j, "hidden_act", "silu") == "silu",
               "config.json: hidden_act must be silu for SwiGLU");
    MT_REQUIRE(CheckpointError, !j.contains("rope_scaling") || j["rope_scaling"].is_null(),
               "config.json: rope_scaling is not supported");
  }
  std::set<std::string> seen;
  std::map<std::string, std::string> names;
  read_hf_fields(j, arch, c, seen, names);
  for (const char* key : required)
    MT_REQUIRE(CheckpointError, seen.count(key), a, " config.json: '", names[key], "' missing (model.", key, ")");
  if (arch == HfArch::Gpt2) {
    c.n_kv_heads = c.n_heads;
  } else {
    if (!seen.count("n_kv_heads")) c.n_kv_heads = c.n_heads;
    MT_REQUIRE(CheckpointError, get_or<bool>(j, "mlp_bias", c.bias) == c.bias,
               "config.json: attention_bias != mlp_bias is not supported (one 'bias' switch)");
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
  if (const HfArch arch = hf_arch_for(c); arch != HfArch::Gpt2) {
    for (const auto& p : spec.params) out.push_back({llama_family_name(p.name, arch), p.shape, need(params, p.name)});
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
  if (const HfArch arch = hf_arch_for(c); arch != HfArch::Gpt2) {
    for (const auto& p : spec.params) out[p.name] = fetch(llama_family_name(p.name, arch), p.shape);
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
