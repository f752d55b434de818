// A rank's step program: its schedule actions with chunks expanded into
// segments (forward in ascending, backward in descending segment order) and
// the data-parallel engine's parameter actions placed by counting:
//   ReduceGrads(u) right after the last action of the window that writes
//     unit u's gradient (or, without overlap, all at the end);
//   reproducible mode: CloseLeaf(u) right after the last action of each
//     micro-batch that writes unit u's gradient;
//   ZeRO-3: Require(u) before each use of u's parameters, Gather of the
//     next compute action's units just before the current one (prefetch in
//     the schedule's order), Release(u) when the next compute action does
//     not use u (after forward only with reshard_after_forward), or with
//     keep_gathered after its last use of the window.
// The executor (executor.h) runs it as given.
#pragma once

#include <functional>
#include <vector>

#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/schedule.h"

namespace meshtrain::parallel {

struct ParamPolicy {
  bool gather_params = false;        // ZeRO-3: parameters sharded at rest
  bool reshard_after_forward = true;
  bool overlap = true;               // reduce a unit's gradient as soon as it is complete
  bool close_leaves = false;         // reproducible mode: CloseLeaf(u) after each micro-batch's last write of u
  // ZeRO-3: a unit gathered once stays until its last use of the window
  // (one gather per unit and window instead of one per use: more memory,
  // less traffic under pipeline and accumulation schedules).
  bool keep_gathered = false;
};

struct Program {
  std::vector<Action> actions;
  int micro_batches = 1;
  bool trains = true;  // has backward actions
};

// units_of(segment): the parameter units a segment reads and writes
// (model::Transformer::segment_units). validated: the caller has run
// validate(schedule) already (the planner expands one schedule for every
// pipeline rank of a large mesh).
Program expand(const Schedule& schedule, int pp_rank, const std::vector<Chunk>& chunks,
               const std::function<std::vector<int>(int)>& units_of, const ParamPolicy& policy,
               bool validated = false);

}  // namespace meshtrain::parallel
