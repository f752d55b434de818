#include "meshtrain/model/tp_plan.h"

#include <fnmatch.h>

#include <array>

#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::model {

namespace {

// Attention heads are split whole; the feed-forward's hidden units split
// on the same indices for gate and up (the product stays local) and in
// routed or shared experts alike (`*` matches across dots).
constexpr std::array kDefaultPlan{
    TpRule{"model.embed_tokens", TpStyle::Vocab},
    TpRule{"lm_head", TpStyle::Vocab},
    TpRule{"model.layers.*.self_attn.q_proj", TpStyle::Column, TpGranule::Head},
    TpRule{"model.layers.*.self_attn.[kv]_proj", TpStyle::Column, TpGranule::KvHead},
    TpRule{"model.layers.*.self_attn.o_proj", TpStyle::Row, TpGranule::Head},
    TpRule{"model.layers.*.gate_proj", TpStyle::Column},
    TpRule{"model.layers.*.up_proj", TpStyle::Column},
    TpRule{"model.layers.*.fc_in", TpStyle::Column},
    TpRule{"model.layers.*.down_proj", TpStyle::Row},
    TpRule{"model.layers.*.fc_out", TpStyle::Row},
};

bool is_bias(std::string_view param_name) {
  return param_name.size() >= 5 && param_name.substr(param_name.size() - 5) == ".bias";
}

Placement placement_for(const TpRule& rule, bool bias, const ModelConfig& cfg) {
  const int64_t granule = rule.granule == TpGranule::Element ? 1 : cfg.head_dim;
  const int max_pieces = rule.granule == TpGranule::KvHead ? int(cfg.n_kv_heads) : 0;
  switch (rule.style) {
    case TpStyle::Replicate: return Placement::replicate();
    case TpStyle::Column: return Placement::shard(0, granule, max_pieces);
    case TpStyle::Row: return bias ? Placement::replicate() : Placement::shard(1, granule, max_pieces);
    case TpStyle::Vocab: return Placement::shard(0);
  }
  return Placement::replicate();
}

}  // namespace

const char* to_string(TpStyle s) {
  switch (s) {
    case TpStyle::Replicate: return "replicate";
    case TpStyle::Column: return "column";
    case TpStyle::Row: return "row";
    case TpStyle::Vocab: return "vocab";
  }
  return "?";
}

TpPlan default_tp_plan() { return kDefaultPlan; }

std::string_view module_of(std::string_view param_name) {
  const size_t dot = param_name.rfind('.');
  return dot == std::string_view::npos ? param_name : param_name.substr(0, dot);
}

const TpRule* match_tp_rule(TpPlan plan, std::string_view module) {
  const std::string name(module);
  for (const TpRule& r : plan)
    if (fnmatch(std::string(r.module).c_str(), name.c_str(), 0) == 0) return &r;
  return nullptr;
}

void parallelize(ModelSpec& pure, const ModelConfig& cfg, TpPlan plan) {
  for (ParamSpec& p : pure.params) {
    MT_CHECK(!p.is_split(), "parallelize takes the whole model; ", p.name, " is already a piece");
    const TpRule* rule = match_tp_rule(plan, module_of(p.name));
    p.tp_style = rule ? rule->style : TpStyle::Replicate;
    p.tp = rule ? placement_for(*rule, is_bias(p.name), cfg) : Placement::replicate();
  }
}

void require_style(const ParamSpec& p, TpStyle expected, int tp_size, std::string_view layer) {
  if (p.tp_style == expected || (tp_size == 1 && p.tp_style == TpStyle::Replicate)) return;
  MT_THROW(ConfigError, "the tensor-parallel plan makes ", p.name, " ", to_string(p.tp_style), "-parallel, but ",
           layer, " computes it ", to_string(expected), "-parallel",
           tp_size == 1 ? "" : " (replicate runs only on a group of one)",
           "; give its module the style ", to_string(expected), " in the plan (model/tp_plan.cc)");
}

}  // namespace meshtrain::model
