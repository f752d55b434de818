// Binds a Linear to its parameters by HF name prefix.
#pragma once

#include <string>

#include "meshtrain/model/layers.h"

namespace meshtrain::model {

template <typename T>
Linear<T> bind_linear(ParameterStore<T>& params, const std::string& prefix, bool bias) {
  Linear<T> l;
  l.weight = &params.find(prefix + ".weight");
  l.bias = bias ? &params.find(prefix + ".bias") : nullptr;
  l.out = l.weight->spec->shape[0];
  l.in = l.weight->spec->shape[1];
  return l;
}

template <typename T>
Norm<T> bind_norm(ParameterStore<T>& params, const ModelConfig& cfg, const std::string& prefix) {
  Norm<T> n;
  n.kind = cfg.norm;
  n.weight = &params.find(prefix + ".weight");
  n.bias = cfg.norm == NormKind::LayerNorm ? &params.find(prefix + ".bias") : nullptr;
  n.d = cfg.d_model;
  n.eps = T(cfg.norm_eps);
  return n;
}

}  // namespace meshtrain::model
