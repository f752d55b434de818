#include "meshtrain/model/param_spec.h"

#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

namespace {

class SpecBuilder {
 public:
  explicit SpecBuilder(ModelSpec& spec) : spec_(spec) {}
  void begin_unit(std::string name) { spec_.units.push_back({std::move(name), 0, {}}); }
  void add(std::string name, Shape shape, InitKind init, double std, bool decay) {
    ParamUnit& u = spec_.units.back();
    ParamSpec p{std::move(name), shape, init, std, decay, int(spec_.units.size()) - 1, u.numel};
    u.numel += p.numel();
    u.params.push_back(int(spec_.params.size()));
    spec_.params.push_back(std::move(p));
  }
  // Linear layer weight [out, in] (+ bias [out]).
  void linear(const std::string& prefix, int64_t out, int64_t in, double std, bool bias) {
    add(prefix + ".weight", Shape{out, in}, InitKind::Normal, std, true);
    if (bias) add(prefix + ".bias", Shape{out}, InitKind::Zeros, 0, false);
  }
  void norm(const std::string& prefix, int64_t d, bool with_bias) {
    add(prefix + ".weight", Shape{d}, InitKind::Ones, 0, false);
    if (with_bias) add(prefix + ".bias", Shape{d}, InitKind::Zeros, 0, false);
  }

 private:
  ModelSpec& spec_;
};

}  // namespace

int64_t ModelSpec::total_params() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t ModelSpec::matmul_params(const ModelConfig& cfg) const {
  int64_t n = 0;
  for (const auto& p : params) {
    if (p.shape.rank() != 2) continue;
    if (p.name == "model.embed_tokens.weight" && !cfg.tied_embeddings) continue;
    if (p.name == "model.embed_positions.weight") continue;
    n += p.numel();
  }
  return n;
}

const ParamSpec& ModelSpec::find(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return p;
  MT_THROW(InternalError, "no parameter named '", name, "'");
}

ModelSpec build_model_spec(const ModelConfig& cfg) {
  ModelSpec spec;
  SpecBuilder b(spec);
  const double std = cfg.init_std;
  // Residual-branch output projections are scaled down so the residual
  // stream's variance does not grow with depth (GPT-2 init).
  const double out_std = std / std::sqrt(2.0 * double(cfg.n_layers));
  const bool layer_norm = cfg.norm == NormKind::LayerNorm;

  b.begin_unit("embed");
  b.add("model.embed_tokens.weight", Shape{cfg.vocab_size, cfg.d_model}, InitKind::Normal, std, true);
  if (cfg.positions == PositionKind::Learned)
    b.add("model.embed_positions.weight", Shape{cfg.max_seq_len, cfg.d_model}, InitKind::Normal, std, true);

  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    b.begin_unit("layers." + std::to_string(l));
    b.norm(p + ".input_layernorm", cfg.d_model, layer_norm);
    b.linear(p + ".self_attn.q_proj", cfg.q_dim(), cfg.d_model, std, cfg.bias);
    b.linear(p + ".self_attn.k_proj", cfg.kv_dim(), cfg.d_model, std, cfg.bias);
    b.linear(p + ".self_attn.v_proj", cfg.kv_dim(), cfg.d_model, std, cfg.bias);
    b.linear(p + ".self_attn.o_proj", cfg.d_model, cfg.q_dim(), out_std, cfg.bias);
    b.norm(p + ".post_attention_layernorm", cfg.d_model, layer_norm);
    if (cfg.mlp == MlpKind::SwiGLU) {
      b.linear(p + ".mlp.gate_proj", cfg.ffn_hidden, cfg.d_model, std, cfg.bias);
      b.linear(p + ".mlp.up_proj", cfg.ffn_hidden, cfg.d_model, std, cfg.bias);
      b.linear(p + ".mlp.down_proj", cfg.d_model, cfg.ffn_hidden, out_std, cfg.bias);
    } else {
      b.linear(p + ".mlp.fc_in", cfg.ffn_hidden, cfg.d_model, std, cfg.bias);
      b.linear(p + ".mlp.fc_out", cfg.d_model, cfg.ffn_hidden, out_std, cfg.bias);
    }
  }

  b.begin_unit("final");
  b.norm("model.norm", cfg.d_model, layer_norm);
  if (!cfg.tied_embeddings)
    b.add("lm_head.weight", Shape{cfg.vocab_size, cfg.d_model}, InitKind::Normal, std, true);
  return spec;
}

double model_flops_per_token(const ModelConfig& cfg, int64_t seq) {
  const ModelSpec spec = build_model_spec(cfg);
  return 6.0 * double(spec.matmul_params(cfg)) + 12.0 * double(cfg.n_layers * cfg.d_model * seq);
}

}  // namespace meshtrain::model
