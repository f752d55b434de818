// Gradients that are partial over tensor-parallel ranks (docs/math.md,
// "Partial gradients of replicated parameters", (M.38)), as the layout plan
// says: a replicated weight whose ranks saw different sequence shards
// (reduce_axes holds tp: norms, row-parallel biases, learned positions under
// sequence parallelism), and a piece shared by several tp ranks (a KV head on
// tp / kv_heads ranks: each rank's gradient holds its own query heads' part;
// tp_replicas > 1) — summed over exactly the ranks sharing it. A unit's
// partial gradients are summed once per window, when its gradient is complete
// and before the data-parallel reduction, packed into one all-reduce per
// (unit, group). Every member gets the same sum, so the copies stay identical
// and the plan counts one of them in the norm and in checkpoints.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/rank_groups.h"

namespace meshtrain::parallel {

struct TpGradSumStats {
  int calls = 0;
  int64_t bytes = 0;  // logical message bytes summed
  double seconds = 0;
};

class TpGradSums {
 public:
  // groups: the rank's tp group (null: nothing to sum) and its sub-groups
  // of ranks sharing a piece (rank_groups.h).
  TpGradSums(const LayoutPlan& plan, const RankGroups& groups, std::shared_ptr<CachingAllocator> alloc);
  bool any(int u) const;
  // Sums the partial parameters of unit u's flat gradient (the unit's
  // layout: parameters at their unit offsets) over their groups, in place.
  void reduce(int u, const Tensor& unit_grad);
  const TpGradSumStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  // The group a parameter's gradient is summed over (null: none); for tests.
  comm::ProcessGroup* group_of(int param) const;

 private:
  struct Sum {
    comm::ProcessGroup* group = nullptr;
    std::vector<int> params;  // of one unit, in storage order
  };
  const model::ModelSpec& spec_;
  std::shared_ptr<CachingAllocator> alloc_;
  std::vector<comm::ProcessGroup*> group_of_;                 // per parameter
  std::vector<std::vector<Sum>> by_unit_;
  TpGradSumStats stats_;
};

}  // namespace meshtrain::parallel
