// Self-attention: q/k/v projections (column-parallel: this rank's heads),
// RoPE, blockwise causal attention over packed documents (GQA), output
// projection (row-parallel, without its bias: the block adds it once, after
// the tensor-parallel reduction). Head counts come from the local weights.
// Under context parallelism the attention itself runs around the cp ring
// (ring_attention.h); everything else sees this rank's tokens only. A
// micro-batch of canonical token blocks (reproducible mode) runs the
// chunk-pair attention (canonical_attention.h) on every layout.
#pragma once

#include <memory>

#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/model/canonical_attention.h"
#include "meshtrain/model/layers.h"
#include "meshtrain/model/ring_attention.h"
#include "meshtrain/model/token_batch.h"

namespace meshtrain::model {

class SelfAttention {
 public:
  struct Saved {
    Tensor q, k, v;  // after RoPE: [n, Hq*D], [n, Hkv*D], [n, Hkv*D] (local heads)
    Tensor out;      // attention output before o_proj [n, Hq*D]
    Tensor out_op;   // the same as o_proj's operand (out itself under f32)
    Tensor lse;      // [rows, Hq, seq]
  };

  // canonical_blocks: reproducible mode's blocks of the sums over heads'
  // features (canonical_sum.h; 0: one GEMM each). kv_share: the tp ranks
  // sharing this rank's KV head (null: none; reproducible mode sums its
  // gradient over them, canonical_attention.h).
  SelfAttention(const ModelConfig& cfg, ParameterStore& params, const std::string& prefix,
                const kernels::RopeTable* rope, const RingAttention* ring = nullptr, int canonical_blocks = 0,
                comm::ProcessGroup* kv_share = nullptr);
  // xn is the projections' operand (in the policy's matmul type); its rows
  // readable now are projected first (GatheredRows).
  // y = o_proj(attention(xn)) + base when base is defined (the fused
  // residual add; base may be y), else y = o_proj(attention(xn)) (a partial
  // sum under tensor parallelism). With `project`, o_proj is the caller's
  // (y and base unused).
  Saved forward(const kernels::KernelTable& k, const GatheredRows& xn, const TokenBatch& b, const Tensor& y,
                const Tensor& base, const std::shared_ptr<CachingAllocator>& alloc,
                const ProjectOutput& project = {}) const;
  // B: dxn = d attention / d xn . dy (overwrites); weight grads go to `wg`.
  // dy_changes: the caller overwrites dy before deferred weight grads run.
  void backward(const kernels::KernelTable& k, const Tensor& xn, const Saved& s, const TokenBatch& b,
                const GatheredRows& dy, bool dy_changes, const Tensor& dxn, WeightGrads& wg,
                const std::shared_ptr<CachingAllocator>& alloc) const;
  int64_t q_heads() const { return q_heads_; }
  int64_t kv_heads() const { return kv_heads_; }

 private:
  kernels::AttentionShape shape(const TokenBatch& b) const;
  ChunkPairs chunk_pairs(const TokenBatch& b) const { return {cp_, b.token_blocks, b.chunk_segments}; }
  double scale() const;
  // Reproducible mode's backward (chunk pairs; per query head under GQA).
  void canonical_backward(const kernels::KernelTable& k, const Saved& s, const TokenBatch& b, const Tensor& dout,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          const std::shared_ptr<CachingAllocator>& alloc) const;
  int64_t head_dim_;
  DType op_, acc_;  // matmul operand type, accumulate/output type (precision policy)
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
  int64_t q_heads_, kv_heads_;
  int64_t group_;  // the model's query heads per KV head
  const kernels::RopeTable* rope_;
  const RingAttention* ring_;  // context parallelism: attention over the cp group (null or inactive: none)
  comm::ProcessGroup* cp_;     // the cp group (null: none)
  int canonical_blocks_;
  comm::ProcessGroup* kv_share_;  // the tp ranks sharing this rank's KV head (null or one: none)
};

}  // namespace meshtrain::model
