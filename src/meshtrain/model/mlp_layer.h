// Feed-forward: SwiGLU (gate/up/down, Llama) or GELU (fc_in/fc_out, GPT-2).
#pragma once

#include <memory>

#include "meshtrain/model/layers.h"
#include "meshtrain/model/token_batch.h"

namespace meshtrain::model {

template <typename T>
class Mlp {
 public:
  struct Saved {
    Tensor a, b;  // SwiGLU: gate, up. GELU: pre-activation, (unused)
    Tensor act;   // input of the output projection [n, hidden]
  };

  Mlp(const ModelConfig& cfg, ParameterStore<T>& params, const std::string& prefix);
  // y += mlp(xn) (residual add fused into the output projection).
  Saved forward(const T* xn, int64_t n, T* y, const std::shared_ptr<CachingAllocator>& alloc) const;
  // dxn = d mlp / d xn . dy (overwrites); parameter grads accumulate.
  void backward(const T* xn, const Saved& s, int64_t n, const T* dy, T* dxn,
                const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  const ModelConfig& cfg_;
  Linear<T> in_a_, in_b_, out_;  // SwiGLU: gate, up, down. GELU: fc_in, -, fc_out
};

}  // namespace meshtrain::model
