#include "meshtrain/model/param_spec.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/model/canonical_sum.h"
#include "meshtrain/kernels/cpu/elementwise.h"

namespace meshtrain::model {

namespace {

// Every routed expert starts on a norm block boundary of its unit, so the
// global norm's blocks (kernels::kSumBlock elements) hold the same elements
// whichever experts share a rank's unit: the norm is bitwise the same
// under every ep (parallel/grad_norm.h). The gap stays zero.
int64_t expert_start(int64_t offset) {
  return (offset + kernels::kSumBlock - 1) / kernels::kSumBlock * kernels::kSumBlock;
}

class SpecBuilder {
 public:
  explicit SpecBuilder(ModelSpec& spec) : spec_(spec) {}
  // Units 0 .. n_layers + 1 are the segments, in order.
  void begin_unit(std::string name) {
    const int segment = int(spec_.units.size());
    spec_.units.push_back({std::move(name), 0, {}, true, segment, false});
  }
  // Routed experts' units follow every segment's (param_spec.h); their
  // parameters keep their place in the parameter list (and so their
  // initial values), only their unit differs.
  void finish() {
    for (ParamUnit& u : expert_units_) {
      for (int i : u.params) spec_.params[size_t(i)].unit = int(spec_.units.size());
      spec_.units.push_back(std::move(u));
    }
    expert_units_.clear();
  }
  // Every parameter starts replicated: the tensor-parallel plan places it
  // afterwards (tp_plan.h).
  void add(std::string name, Shape shape, InitKind init, double std, bool decay) {
    ParamUnit& u = in_experts_ ? expert_units_.back() : spec_.units.back();
    ParamSpec p;
    p.name = std::move(name);
    p.shape = p.global_shape = shape;
    p.global_offset.assign(size_t(shape.rank()), 0);
    p.init = init;
    p.init_std = std;
    p.weight_decay = decay;
    p.unit = int(spec_.units.size()) - 1;
    p.unit_offset = u.numel;
    p.global_index = int(spec_.params.size());
    u.numel += p.numel();
    u.params.push_back(int(spec_.params.size()));
    spec_.params.push_back(std::move(p));
  }
  // Linear weight [out, in] (+ bias [out]).
  void linear(const std::string& prefix, int64_t out, int64_t in, double std, bool bias) {
    add(prefix + ".weight", Shape{out, in}, InitKind::Normal, std, true);
    if (bias) add(prefix + ".bias", Shape{out}, InitKind::Zeros, 0, false);
  }
  // A feed-forward (dense, an expert or the shared expert) under `prefix`;
  // the output projection's bias, if any, is the block's (mlp_layer.h).
  void ffn(const ModelConfig& cfg, const std::string& prefix, double std, double out_std, bool out_bias) {
    if (cfg.mlp == MlpKind::SwiGLU) {
      linear(prefix + ".gate_proj", cfg.ffn_hidden, cfg.d_model, std, cfg.bias);
      linear(prefix + ".up_proj", cfg.ffn_hidden, cfg.d_model, std, cfg.bias);
      linear(prefix + ".down_proj", cfg.d_model, cfg.ffn_hidden, out_std, out_bias);
    } else {
      linear(prefix + ".fc_in", cfg.ffn_hidden, cfg.d_model, std, cfg.bias);
      linear(prefix + ".fc_out", cfg.d_model, cfg.ffn_hidden, out_std, out_bias);
    }
  }
  // Mixture of experts (moe_layer.h): the router (fp32 logits, replicated),
  // each routed expert's feed-forward tagged with its index (expert
  // parallelism places whole experts), the optional shared expert.
  void moe(const ModelConfig& cfg, const std::string& prefix, double std, double out_std) {
    add(prefix + ".router.weight", Shape{cfg.n_experts, cfg.d_model}, InitKind::Normal, std, true);
    const ParamUnit& block = spec_.units.back();
    expert_units_.push_back({block.name + ".experts", 0, {}, true, block.segment, true});
    in_experts_ = true;
    for (int64_t e = 0; e < cfg.n_experts; ++e) {
      const size_t first = spec_.params.size();
      expert_units_.back().numel = expert_start(expert_units_.back().numel);
      ffn(cfg, prefix + ".experts." + std::to_string(e), std, out_std, false);
      for (size_t i = first; i < spec_.params.size(); ++i) spec_.params[i].expert = int(e);
    }
    in_experts_ = false;
    if (cfg.moe_shared_expert) ffn(cfg, prefix + ".shared_expert", std, out_std, false);
  }
  void norm(const std::string& prefix, int64_t d, bool with_bias) {
    add(prefix + ".weight", Shape{d}, InitKind::Ones, 0, false);
    if (with_bias) add(prefix + ".bias", Shape{d}, InitKind::Zeros, 0, false);
  }

 private:
  ModelSpec& spec_;
  std::vector<ParamUnit> expert_units_;  // appended by finish()
  bool in_experts_ = false;
};

}  // namespace

int64_t ParamSpec::global_flat(int64_t i) const {
  if (!is_split()) return i;
  int64_t flat = 0, rest = i, stride = 1;
  // Row-major: peel local coordinates from the last dim.
  for (int d = shape.rank() - 1; d >= 0; --d) {
    const int64_t c = rest % shape[d];
    rest /= shape[d];
    flat += (c + global_offset[size_t(d)]) * stride;
    stride *= global_shape[d];
  }
  return flat;
}

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
    // A token runs top_k of the n_experts routed experts: only those count.
    n += p.expert >= 0 ? p.numel() * cfg.experts_top_k / cfg.n_experts : p.numel();
  }
  return n;
}

std::vector<int> ModelSpec::segment_units(int s) const {
  std::vector<int> out;
  int last_segment = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    last_segment = std::max(last_segment, units[u].segment);
    if (units[u].segment == s && units[u].held) out.push_back(int(u));
  }
  if (tied_head && s == last_segment && units[0].held) out.push_back(0);
  return out;
}

const ParamSpec* ModelSpec::find_or_null(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamSpec& ModelSpec::find(const std::string& name) const {
  if (const ParamSpec* p = find_or_null(name)) return *p;
  MT_THROW(InternalError, "no parameter named '", name, "'");
}

ModelSpec pure_model_spec(const ModelConfig& cfg) {
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
    if (cfg.is_moe_layer(l))
      b.moe(cfg, p + ".mlp", std, out_std);
    else
      b.ffn(cfg, p + ".mlp", std, out_std, cfg.bias);
  }

  b.begin_unit("final");
  b.norm("model.norm", cfg.d_model, layer_norm);
  if (!cfg.tied_embeddings)
    b.add("lm_head.weight", Shape{cfg.vocab_size, cfg.d_model}, InitKind::Normal, std, true);
  b.finish();
  spec.tied_head = cfg.tied_embeddings;
  return spec;
}

ModelSpec build_model_spec(const ModelConfig& cfg) {
  ModelSpec spec = pure_model_spec(cfg);
  parallelize(spec, cfg);
  return spec;
}

void check_tensor_parallel(const ModelConfig& cfg, int tp) {
  MT_REQUIRE(ConfigError, tp >= 1, "parallel.tp = ", tp, ": expected >= 1");
  if (tp == 1) return;
  MT_REQUIRE(ConfigError, cfg.n_experts == 0, "model.n_experts = ", cfg.n_experts, " with parallel.tp = ", tp,
             ": mixture-of-experts blocks run whole experts on a rank; use parallel.ep to split experts");
  MT_REQUIRE(ConfigError, cfg.n_heads % tp == 0, "model.n_heads = ", cfg.n_heads, " does not split over parallel.tp = ",
             tp, " (", cfg.n_heads, " % ", tp, " = ", cfg.n_heads % tp,
             "): every tensor-parallel rank needs whole query heads");
  MT_REQUIRE(ConfigError, cfg.n_kv_heads % tp == 0 || tp % cfg.n_kv_heads == 0, "model.n_kv_heads = ",
             cfg.n_kv_heads, " and parallel.tp = ", tp, ": neither divides the other (", cfg.n_kv_heads, " % ", tp,
             " = ", cfg.n_kv_heads % tp, ", ", tp, " % ", cfg.n_kv_heads, " = ", tp % cfg.n_kv_heads,
             "), so KV heads can be neither split nor shared whole");
}

namespace {
// Piece `piece` of `pieces` of p's split dimension: balanced in granules,
// or, under canonical blocks, whole blocks of the balanced split into
// `blocks` (the same slice where the dimension divides evenly).
Extent tp_extent(const ParamSpec& p, int pieces, int piece, int blocks) {
  const int64_t n = p.global_shape[p.tp.dim];
  if (blocks <= 1 || p.tp.granule != 1 || pieces == 1) return split_extent(n, p.tp.granule, pieces, piece, p.name);
  MT_REQUIRE(ConfigError, blocks % pieces == 0, p.name, ": ", pieces, " tensor-parallel pieces do not divide ",
             "training.reproducible_blocks = ", blocks, " canonical blocks");
  const int per = blocks / pieces;
  const Extent first = canonical_block(n, blocks, piece * per), last = canonical_block(n, blocks, piece * per + per - 1);
  return {first.offset, last.offset + last.length - first.offset};
}
}  // namespace

ModelSpec localize(const ModelSpec& global, const ModelConfig& cfg, const ModelPartition& part) {
  check_tensor_parallel(cfg, part.tp_size);
  MT_CHECK(part.tp_rank >= 0 && part.tp_rank < part.tp_size, "tp rank ", part.tp_rank, " of ", part.tp_size);
  for (int s : part.segments)
    MT_CHECK(s >= 0 && s < int(global.units.size()), "segment ", s, " outside the model's ", global.units.size());
  ModelSpec local;
  local.partition = part;
  local.tied_head = global.tied_head;
  MT_CHECK(part.ep_size >= 1 && part.ep_rank >= 0 && part.ep_rank < part.ep_size, "ep rank ", part.ep_rank, " of ",
           part.ep_size);
  MT_REQUIRE(ConfigError, cfg.n_experts % part.ep_size == 0, "model.n_experts = ", cfg.n_experts,
             " does not split over parallel.ep = ", part.ep_size);
  const int64_t experts_per_rank = cfg.n_experts / part.ep_size, first_expert = part.ep_rank * experts_per_rank;
  for (size_t u = 0; u < global.units.size(); ++u) {
    const ParamUnit& gu = global.units[u];
    ParamUnit lu{gu.name, 0, {}, part.holds(gu.segment) || part.holds_copy(int(u)), gu.segment, gu.experts};
    if (lu.held) {
      for (int gi : gu.params) {
        ParamSpec p = global.params[size_t(gi)];
        if (p.expert >= 0 && (p.expert < first_expert || p.expert >= first_expert + experts_per_rank)) continue;
        if (p.expert >= 0 && (lu.params.empty() || local.params[size_t(lu.params.back())].expert != p.expert))
          lu.numel = expert_start(lu.numel);
        if (p.tp.is_shard()) {
          const int pieces = p.tp.pieces(part.tp_size, p.name);
          const int piece = p.tp.piece_of(part.tp_size, part.tp_rank);
          const Extent e = tp_extent(p, pieces, piece, part.canonical_blocks);
          std::vector<int64_t> dims = p.global_shape.dims();
          dims[size_t(p.tp.dim)] = e.length;
          p.shape = Shape(dims);
          p.global_offset[size_t(p.tp.dim)] = e.offset;
        }
        p.unit_offset = lu.numel;
        lu.numel += p.numel();
        lu.params.push_back(int(local.params.size()));
        local.params.push_back(std::move(p));
      }
    }
    local.units.push_back(std::move(lu));
  }
  return local;
}

double model_flops_per_token(const ModelConfig& cfg, int64_t seq) {
  const ModelSpec spec = build_model_spec(cfg);
  return 6.0 * double(spec.matmul_params(cfg)) + 12.0 * double(cfg.n_layers * cfg.d_model * seq);
}

}  // namespace meshtrain::model
