// Gradients under ZeRO stages 1-3 (docs/math.md (M.26)): each unit's gradient is
// reduce-scattered once it is complete for the window, so each rank keeps
// the reduced shard it owns.
//   stage 1: full gradients live in the flat buffer; the shard is reduced
//     in place.
//   stage 2/3: only the owned shard persists; a unit's full gradient is a
//     transient buffer bound for the window's backward (prepare), reduce-
//     scattered into the shard when complete and freed once that finishes.
// Within a window gradients accumulate locally (no communication before the
// unit's last backward), so every stage sums in the order sum_r (sum_j g).
// When the policy reduces in a narrower type (grad_reduce bf16), the unit's
// gradient is converted into a staging buffer, reduce-scattered there in
// place, and the owned chunk converted back into the f32 shard.
#pragma once

#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/model/parameters.h"
#include "meshtrain/parallel/shard_plan.h"
#include "meshtrain/parallel/sync_stats.h"
#include "meshtrain/parallel/unit_groups.h"

namespace meshtrain::parallel {

class ShardedGrads {
 public:
  // Stage 1 passes the flat gradient buffer and unit offsets; stage 2/3 none.
  ShardedGrads(const ShardPlan& plan, model::ParameterStore& store, const UnitGroups& groups, comm::ReduceOp op,
               std::shared_ptr<CachingAllocator> alloc, GradSyncStats& stats, Tensor flat_grads = {},
               std::vector<int64_t> unit_offset = {});
  ~ShardedGrads();
  ShardedGrads(const ShardedGrads&) = delete;
  ShardedGrads& operator=(const ShardedGrads&) = delete;

  void begin_window() { ++window_; }
  void prepare(int u);  // stage 2/3: unit u's full gradient buffer for this window
  void reduce(int u);   // u's gradient is complete (stage 2/3: prepared, settled): reduce-scatter it
  void wait_all();      // the tail; frees the transient buffers
  Tensor owned(int u);  // this rank's reduced shard of unit u

 private:
  void reap();            // completes reductions that finished (frees their buffers)
  void complete(int u);   // after u's reduction: staged result into the shard, buffers freed
  const ShardPlan& plan_;
  model::ParameterStore& store_;
  const UnitGroups& groups_;
  comm::ReduceOp op_;
  std::shared_ptr<CachingAllocator> alloc_;
  GradSyncStats& stats_;
  Tensor flat_;
  std::vector<int64_t> offset_;
  std::vector<Tensor> shard_, full_, staging_;
  std::vector<comm::Work> work_;
  std::vector<int64_t> window_of_;
  int64_t window_ = 0;
};

}  // namespace meshtrain::parallel
