// comm.hierarchical for a rank's data-parallel groups (dp, data, edp):
// where one spans nodes with the same number of its ranks on each, its
// all-reduce, reduce-scatter and all-gather run as the composition of
// comm/hierarchical_group.h (docs/comm.md, "Hierarchical collectives"):
//   on:   always;
//   auto: per collective, the form the planner's cost model (M.20) vs
//         (M.70) predicts faster on comm.hardware's machine profile
//         (plan/hierarchical_cost.h); without a profile, never (the flat
//         form, measured no slower for all-reduce on the emulated cluster:
//         docs/performance.md, "Hierarchical collectives across nodes");
//   off:  never.
// Everywhere else (one node, one rank per node, nodes with different
// numbers of the group's ranks) the flat group runs, whatever the mode;
// reproducible mode's tree then stays flat too.
#pragma once

#include <string>

#include "meshtrain/comm/parallel_context.h"
#include "meshtrain/parallel/rank_groups.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// The form of this rank's data-parallel groups for parallel::resolve_groups.
// Each group it forms appends a line to *note saying which form it runs
// and why (nothing on a job of one node).
parallel::DataGroupForm data_group_form(const TrainConfig& cfg, const comm::ParallelContext& ctx, std::string* note);

}  // namespace meshtrain::train
