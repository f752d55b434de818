// Binds a Linear or a Norm to its (local) parameters by HF name prefix: the
// layer's sizes come from the rank-local spec.
#pragma once

#include <string>

#include "meshtrain/model/layers.h"

namespace meshtrain::model {

inline Linear bind_linear(ParameterStore& params, const std::string& prefix, bool bias) {
  Linear l;
  l.weight = &params.find(prefix + ".weight");
  l.bias = bias ? &params.find(prefix + ".bias") : nullptr;
  l.out = l.weight->spec->shape[0];
  l.in = l.weight->spec->shape[1];
  return l;
}

inline Norm bind_norm(ParameterStore& params, const ModelConfig& cfg, const std::string& prefix) {
  Norm n;
  n.kind = cfg.norm;
  n.weight = &params.find(prefix + ".weight");
  n.bias = cfg.norm == NormKind::LayerNorm ? &params.find(prefix + ".bias") : nullptr;
  n.d = cfg.d_model;
  n.eps = cfg.norm_eps;
  return n;
}

}  // namespace meshtrain::model
