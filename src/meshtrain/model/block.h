// Pre-norm transformer block: h = x + attn(norm1(x)); y = h + mlp(norm2(h)).
// With recompute, forward keeps only the block input and backward replays
// forward (SPEC S3; no side effects on persistent state, so replay is exact).
#pragma once

#include "meshtrain/model/attention_layer.h"
#include "meshtrain/model/mlp_layer.h"

namespace meshtrain::model {

template <typename T>
class Block {
 public:
  struct Saved {
    Tensor x;  // block input [n, d]
    bool full = false;
    Tensor xn1, mean1, rstd1, h, xn2, mean2, rstd2;
    typename SelfAttention<T>::Saved attn;
    typename Mlp<T>::Saved mlp;
  };

  Block(const ModelConfig& cfg, ParameterStore<T>& params, int64_t layer, const kernels::RopeTable* rope);
  // Returns the block output [n, d]; `saved` receives what backward needs.
  Tensor forward(const Tensor& x, const TokenBatch& b, bool recompute, Saved* saved,
                 const std::shared_ptr<CachingAllocator>& alloc) const;
  // dres holds dL/dy on entry and dL/dx on return (in place).
  void backward(Saved& saved, const TokenBatch& b, Tensor& dres, const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  const ModelConfig& cfg_;
  Norm<T> norm1_, norm2_;
  SelfAttention<T> attn_;
  Mlp<T> mlp_;
};

}  // namespace meshtrain::model
