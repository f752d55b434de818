// One rank's training step as the planner knows it: the trainer's own step
// run on the meta device over recording groups (train/meta_step.h), which
// allocates and communicates exactly as a real rank of the layout does
// without computing or touching memory. The planner asks for it through a
// StepRecorder (the train layer provides one), per rank class.
#pragma once

#include <functional>
#include <memory>

#include "meshtrain/comm/comm_plan.h"
#include "meshtrain/comm/recording/recording_group.h"
#include "meshtrain/core/memory_tracker.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/program.h"
#include "meshtrain/parallel/schedule.h"
#include "meshtrain/plan/step_inputs.h"

namespace meshtrain::plan {

using comm::kNeverCompletes;

struct RankStep {
  int rank = 0;
  int count = 1;  // ranks of the mesh this one stands for (same local spec, same program)
  std::shared_ptr<const parallel::LayoutPlan> plan;
  parallel::Program program;  // what the rank runs; the ledger's actions index into it
  MemorySnapshot at_rest;     // current bytes when a step starts (persistent state)
  MemorySnapshot peak;        // peaks during the step
  comm::CommLedger comm;      // every collective and transfer of the step, on CommStats's groups
  int live_micro_batches = 0;  // most micro-batches whose activations the rank held at once
};

// Records `rank`'s step for `in`; completion_lag: how many completion tests
// a non-blocking collective takes (1 and kNeverCompletes bracket the timing
// of overlapped reductions; 2 is the point estimate).
using StepRecorder = std::function<RankStep(const StepInputs& in, int rank, int completion_lag)>;

// The schedule the trainer runs for `in` (parallel.schedule over pp ranks,
// G micro-batches, v chunks per rank).
parallel::Schedule train_schedule(const StepInputs& in);

}  // namespace meshtrain::plan
