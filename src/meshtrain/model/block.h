// Pre-norm transformer block: h = x + attn(norm1(x)); y = h + mlp(norm2(h)).
// With recompute, forward keeps only the block input and backward replays
// forward (SPEC S3; no side effects on persistent state, so replay is exact).
//
// The residual add is fused into the output projections' GEMM (beta = 1)
// when nothing must happen between the two; under tensor parallelism the
// row-parallel partial sums are reduced over the tp group first and added
// after (29.12), and the column-parallel input gradients are summed the
// same way in backward (S6).
#pragma once

#include "meshtrain/comm/process_group.h"
#include "meshtrain/model/attention_layer.h"
#include "meshtrain/model/mlp_layer.h"

namespace meshtrain::model {

class Block {
 public:
  struct Saved {
    Tensor x;  // block input [n, d]
    bool full = false;
    Tensor xn1, h, xn2;  // xn1, xn2 as matmul operands (the policy's matmul type)
    Norm::Stats stats1, stats2;
    SelfAttention::Saved attn;
    Mlp::Saved mlp;
  };

  // tp: this rank's tensor-parallel group (null: none).
  Block(const ModelConfig& cfg, ParameterStore& params, int64_t layer, const kernels::RopeTable* rope,
        comm::ProcessGroup* tp, bool fuse_residual);
  // Returns the block output [n, d]; `saved` receives what backward needs.
  Tensor forward(const kernels::KernelTable& k, const Tensor& x, const TokenBatch& b, bool recompute, Saved* saved,
                 const std::shared_ptr<CachingAllocator>& alloc) const;
  // B: dres holds dL/dy on entry and dL/dx on return (in place); weight
  // gradients go to `wg` (now or deferred).
  void backward(const kernels::KernelTable& k, Saved& saved, const TokenBatch& b, Tensor& dres, WeightGrads& wg,
                const std::shared_ptr<CachingAllocator>& alloc) const;
  bool fused_residual() const { return fuse_; }

 private:
  void sum_over_tp(const Tensor& t) const;
  const ModelConfig& cfg_;
  Norm norm1_, norm2_;
  SelfAttention attn_;
  Mlp mlp_;
  comm::ProcessGroup* tp_;
  bool fuse_;
  DType op_;  // matmul operand type
};

}  // namespace meshtrain::model
