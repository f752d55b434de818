// Mixture-of-experts feed-forward (SPEC S8; docs/moe.md): a router (fp32
// logits and softmax) picks top_k of n_experts feed-forwards per token
// (moe_routing.h: row-level capacity and aux loss, the same under every
// layout), each expert runs its tokens as one contiguous block, and the
// outputs are combined with the router probabilities in (token, slot)
// order; an optional shared expert takes every token. Same interface as
// Mlp, so the block treats both alike.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/model/mlp_layer.h"
#include "meshtrain/model/moe_routing.h"
#include "meshtrain/model/moe_stats.h"

namespace meshtrain::model {

class MoeLayer {
 public:
  struct Saved {
    std::shared_ptr<const MoeRouting> routing;
    Tensor x_experts;                 // gathered expert inputs [buffer rows, d] (operand type)
    Tensor y_experts;                 // expert outputs [buffer rows, d]
    std::vector<Mlp::Saved> experts;  // per expert (empty blocks: nothing)
    Mlp::Saved shared;
  };

  MoeLayer(const ModelConfig& cfg, ParameterStore& params, const std::string& prefix);
  // y (+)= combine(experts(xn)) + shared(xn); records into `stats` when given.
  Saved forward(const kernels::KernelTable& k, const Tensor& xn, int64_t seq, const Tensor& y, bool accumulate_y,
                MoeLayerStats* stats, const std::shared_ptr<CachingAllocator>& alloc) const;
  // B: dxn (overwritten); weight grads to wg. aux_scale: the step's loss
  // coefficient, which the aux loss SUM shares with the cross-entropy sum.
  void backward(const kernels::KernelTable& k, const Tensor& xn, const Saved& s, const Tensor& dy, bool dy_changes,
                const Tensor& dxn, double aux_scale, WeightGrads& wg,
                const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  MoeRoutingConfig routing_config(int64_t seq) const;
  const ModelConfig& cfg_;
  DType op_, acc_;
  Linear router_;
  std::vector<Mlp> experts_;
  std::unique_ptr<Mlp> shared_;
};

}  // namespace meshtrain::model
