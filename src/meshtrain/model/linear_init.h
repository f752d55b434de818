// Binds a Linear or a Norm to its (local) parameters by HF name prefix: the
// layer's sizes come from the rank-local spec, and the layer states the
// tensor-parallel style it computes, which the plan must have given the
// module (tp_plan.h: require_style).
#pragma once

#include <string>

#include "meshtrain/model/layers.h"

namespace meshtrain::model {

inline Parameter& bind_styled(ParameterStore& params, const std::string& name, TpStyle style,
                                    std::string_view layer) {
  Parameter& p = params.find(name);
  require_style(*p.spec, style, params.spec().partition.tp_size, layer);
  return p;
}

inline Linear bind_linear(ParameterStore& params, const std::string& prefix, bool bias, TpStyle style,
                          std::string_view layer) {
  Linear l;
  l.weight = &bind_styled(params, prefix + ".weight", style, layer);
  l.bias = bias ? &params.find(prefix + ".bias") : nullptr;
  l.out = l.weight->spec->shape[0];
  l.in = l.weight->spec->shape[1];
  return l;
}

inline Norm bind_norm(ParameterStore& params, const ModelConfig& cfg, const std::string& prefix) {
  Norm n;
  n.kind = cfg.norm;
  n.weight = &bind_styled(params, prefix + ".weight", TpStyle::Replicate, "a norm");
  n.bias = cfg.norm == NormKind::LayerNorm ? &params.find(prefix + ".bias") : nullptr;
  n.d = cfg.d_model;
  n.eps = cfg.norm_eps;
  return n;
}

}  // namespace meshtrain::model
