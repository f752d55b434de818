// Pre-norm transformer block: h = x + attn(norm1(x)); y = h + mlp(norm2(h)). With
// recompute, forward keeps only the block input and backward replays forward (docs/math.md,
// "Rule: recomputed functions replay exactly"; no side effects on persistent state, and
// every rank of the tensor-parallel group replays the same collectives in the same order).
//
// Tensor parallelism (docs/math.md, "Tensor and sequence parallelism")
// through the regions (regions.h): each sublayer's column-parallel
// projections (q/k/v; gate/up or fc_in) read the normed stream through the
// column-input region, its row-parallel output projection (o_proj; down or
// fc_out) leaves through the row-output region, and only then do the residual
// add and the output projection's bias (added once, on reduced values) happen
// (M.35). Under sequence parallelism the residual stream, the norms and the
// adds hold this rank's n / t rows. Without a reduction in between (one rank)
// the residual add stays fused into the output projection's GEMM (beta = 1).
#pragma once

#include "meshtrain/model/attention_layer.h"
#include "meshtrain/model/mlp_layer.h"
#include "meshtrain/model/moe_layer.h"
#include "meshtrain/model/regions.h"

namespace meshtrain::model {

class Block {
 public:
  struct Saved {
    Tensor x;         // block input: this rank's rows of the stream [nl, d]
    bool full = false;
    Tensor xn1, xn2;  // the column-parallel layers' inputs [n, d] (gathered under SP)
    Tensor h;         // stream after attention [nl, d]
    Norm::Stats stats1, stats2;
    SelfAttention::Saved attn;
    Mlp::Saved mlp;
    MoeLayer::Saved moe;
    double loss_coeff = 0.0;  // the step's, for the MoE aux loss gradient (kept for a replay)
  };

  Block(const ModelConfig& cfg, ParameterStore& params, int64_t layer, const kernels::RopeTable* rope,
        const TpRegions& tp, bool fuse_residual, const RingAttention* ring = nullptr,
        MoeLayerStats* moe_stats = nullptr, comm::ProcessGroup* ep = nullptr, comm::ProcessGroup* kv_share = nullptr);
  // Returns the block output [nl, d]; `saved` receives what backward needs.
  // loss_coeff: the step's (the MoE aux loss shares it); record: count the
  // routing into the MoE stats (not in a replay or an evaluation).
  Tensor forward(const kernels::KernelTable& k, const Tensor& x, const TokenBatch& b, bool recompute, Saved* saved,
                 const std::shared_ptr<CachingAllocator>& alloc, double loss_coeff = 0.0, bool record = false) const;
  // B: dres holds dL/dy on entry and dL/dx on return (in place, this rank's
  // rows); weight gradients go to `wg` (now or deferred).
  void backward(const kernels::KernelTable& k, Saved& saved, const TokenBatch& b, Tensor& dres, WeightGrads& wg,
                const std::shared_ptr<CachingAllocator>& alloc) const;
  bool fused_residual() const { return fuse_; }

 private:
  // stream = base + reduce(project(output)) + bias, where project(out,
  // base, output) writes the branch's (partial) output plus base when
  // given: into the stream itself, base added inside the GEMM, when fused.
  // A dense branch passes `output` (ProjectOutput) on to its layer, which
  // then lets the block run the output projection: under tensor
  // parallelism in row pieces whose sums start as each is written
  // (docs/math.md (M.79)).
  template <typename Project>
  void add_branch(const kernels::KernelTable& k, const Tensor& base, const Tensor& stream, int64_t n,
                  const Parameter* bias, bool dense, const std::shared_ptr<CachingAllocator>& alloc,
                  Project&& project) const;
  // A sublayer's input from `gather`, the all-gather of this rank's rows
  // `local`: this rank's rows readable at once, the others once the
  // sublayer lets them arrive (docs/math.md (M.81)); all readable where
  // nothing is in flight.
  GatheredRows arriving(TpRegions::PendingRows& gather, const Tensor& local, int64_t n) const;
  const ModelConfig& cfg_;
  Norm norm1_, norm2_;
  SelfAttention attn_;
  std::unique_ptr<Mlp> mlp_;     // dense blocks
  std::unique_ptr<MoeLayer> moe_;  // MoE blocks (model.moe_layers)
  MoeLayerStats* moe_stats_ = nullptr;
  Parameter* attn_bias_ = nullptr;  // o_proj.bias (replicated)
  Parameter* mlp_bias_ = nullptr;   // down_proj.bias / fc_out.bias (replicated)
  TpRegions tp_;
  bool fuse_;
  DType op_;  // matmul operand type
};

}  // namespace meshtrain::model
