// Self-attention: q/k/v projections, RoPE, blockwise causal attention over
// packed documents (GQA), output projection.
#pragma once

#include <memory>

#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/model/layers.h"
#include "meshtrain/model/token_batch.h"

namespace meshtrain::model {

template <typename T>
class SelfAttention {
 public:
  struct Saved {
    Tensor q, k, v;  // after RoPE: [n, Hq*D], [n, Hkv*D], [n, Hkv*D]
    Tensor out;      // attention output before o_proj [n, Hq*D]
    Tensor lse;      // [rows, Hq, seq]
  };

  SelfAttention(const ModelConfig& cfg, ParameterStore<T>& params, const std::string& prefix,
                const kernels::RopeTable* rope);
  // y += attention(xn) (residual add fused into o_proj).
  Saved forward(const T* xn, const TokenBatch& b, T* y, const std::shared_ptr<CachingAllocator>& alloc) const;
  // dxn = d attention / d xn . dy (overwrites); parameter grads accumulate.
  void backward(const T* xn, const Saved& s, const TokenBatch& b, const T* dy, T* dxn,
                const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  kernels::AttentionShape shape(const TokenBatch& b) const;
  const ModelConfig& cfg_;
  Linear<T> q_proj_, k_proj_, v_proj_, o_proj_;
  const kernels::RopeTable* rope_;
};

}  // namespace meshtrain::model
