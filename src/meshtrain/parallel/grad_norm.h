// The global gradient norm of docs/math.md (M.12)-(M.13), Algorithm 1
// step 5: the sum of squares of the reduced gradient over the unique logical
// parameters (a copy the layout plan does not count — a tensor-parallel
// replica, a shared KV piece on all but its first rank — adds nothing),
// summed in a canonical order: blocks of kNormBlock elements of each padded
// unit (never straddling two ZeRO owners), gathered over the data-parallel
// group in global block order, then over the model-parallel ranks (pipeline
// stages, tensor-parallel ranks) unit by unit, ranks in order within a unit.
// ZeRO stage changes alone and pipeline splits alone are therefore bitwise
// identical. Routed experts' units (held by their owners only) are summed
// the same way over their own groups — the expert-data-parallel group, then
// the model ranks and the expert-parallel ranks — and added to the dense
// sum. How many blocks each model rank holds of each unit is a fact of the
// layout: every rank computes its model group's counts from their layout
// plans once, so a step exchanges only the blocks' sums.
#pragma once

#include <functional>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/unit_groups.h"

namespace meshtrain::parallel {

// `model`: the model ranks (pp x tp) at this rank's data coordinate;
// `expert_model`: the model ranks times the expert-parallel ranks (every
// holder of some expert), used when the plan has expert units.
class GradNorm {
 public:
  // alloc: where the model ranks' blocks are gathered (a step's workspace).
  GradNorm(const LayoutPlan& plan, const UnitGroups& groups, comm::ProcessGroup& model,
           comm::ProcessGroup& expert_model, std::shared_ptr<CachingAllocator> alloc);
  // owned_grad(u): this rank's reduced gradient of its owned range of unit u.
  // Collective over each unit's group (when ZeRO shards gradients' owners)
  // and the model groups.
  double sum_squares(const std::function<Tensor(int)>& owned_grad) const;

 private:
  // Norm blocks of each unit held by each member of a model group, [M x U],
  // rank-major (unit u of member r: counts[r * U + u]).
  struct Kind {
    bool experts = false;
    comm::ProcessGroup* data = nullptr;
    comm::ProcessGroup* model = nullptr;
    std::vector<int64_t> counts;
  };
  double sum_squares_of(const Kind& kind, const std::function<Tensor(int)>& owned_grad) const;
  const LayoutPlan& plan_;
  std::shared_ptr<CachingAllocator> alloc_;
  std::vector<bool> counted_;  // per unit: every parameter's copy here counts in the norm
  Kind dense_, experts_;
};

}  // namespace meshtrain::parallel
