// Mixture-of-experts feed-forward (docs/math.md, "Mixture of experts and
// expert parallelism"; docs/moe.md): a router (fp32 logits and softmax)
// picks top_k of n_experts feed-forwards per token (moe_routing.h: row-level
// capacity and aux loss, the same under every layout), each expert runs its
// tokens as one contiguous block, and the outputs are combined with the
// router probabilities in (token, slot) order; an optional shared expert
// takes every token. Under expert parallelism (`ep`, a group of ranks carved
// out of dp) the blocks travel to their experts' owners and back
// (expert_exchange.h); a rank stores only the experts it owns (their own
// parameter unit, param_spec.h), so an expert's gradient is its owner's sum
// over the tokens of the ep group, then summed over the expert-data-parallel
// group (the owners' replicas): the one-rank gradient, never a multiple of
// ep. Same interface as Mlp, so the block treats both alike.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/model/expert_exchange.h"
#include "meshtrain/model/mlp_layer.h"
#include "meshtrain/kernels/moe_routing.h"
#include "meshtrain/model/moe_stats.h"

namespace meshtrain::model {

// The routing rule of cfg's MoE blocks for rows of `seq` positions: the
// layer's and the planner's (plan/compute_cost.cc) one source.
kernels::MoeRoutingConfig moe_routing_config(const ModelConfig& cfg, int64_t seq);

class MoeLayer {
 public:
  struct Saved {
    std::shared_ptr<const kernels::MoeRouting> routing;
    std::shared_ptr<const ExpertExchange> exchange;
    Tensor x_experts;                 // this rank's tokens per expert [buffer rows, d] (operand type)
    Tensor y_experts;                 // their outputs, back from the owners [buffer rows, d]
    Tensor x_blocks;                  // the blocks this rank computes (x_experts itself without ep)
    std::vector<Mlp::Saved> blocks;   // per exchange block
    Mlp::Saved shared;
  };

  // ep: the expert-parallel group (null or size 1: every expert local).
  MoeLayer(const ModelConfig& cfg, ParameterStore& params, const std::string& prefix, comm::ProcessGroup* ep);
  // y = combine(experts(xn)) + shared(xn) (+ base when defined; base may be
  // y); records into `stats` when given.
  Saved forward(const kernels::KernelTable& k, const Tensor& xn, int64_t seq, const Tensor& y, const Tensor& base,
                MoeLayerStats* stats, const std::shared_ptr<CachingAllocator>& alloc) const;
  // B: dxn (overwritten); weight grads to wg. aux_scale: the step's loss
  // coefficient, which the aux loss SUM shares with the cross-entropy sum.
  void backward(const kernels::KernelTable& k, const Tensor& xn, const Saved& s, const Tensor& dy, bool dy_changes,
                const Tensor& dxn, double aux_scale, WeightGrads& wg,
                const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  kernels::MoeRoutingConfig routing_config(int64_t seq) const;
  const ModelConfig& cfg_;
  DType op_, acc_;
  Linear router_;
  std::vector<Mlp> experts_;  // this rank's: global index first_expert_ + i
  int64_t first_expert_ = 0;
  ParameterStore* params_ = nullptr;
  int expert_unit_ = -1;  // the unit holding this rank's experts
  const Mlp& local_expert(int64_t global_index) const { return experts_[size_t(global_index - first_expert_)]; }
  std::unique_ptr<Mlp> shared_;
  comm::ProcessGroup* ep_;
};

}  // namespace meshtrain::model
