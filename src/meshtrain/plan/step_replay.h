// One training step of one rank, replayed without running: the trainer's
// program (the schedule expanded with the engine's parameter actions, the
// same expand() the trainer calls) walked by a mirror of the executor
// (executor.cc) over the model's and the engine's allocation mirrors
// (model/memory_trace.h, engine_replay.h), plus the trainer's own
// collectives (trainer.cc: the target count, the loss, the joint
// finiteness flag). Gives the memory the rank holds at rest, the peak of
// every category during the step and every collective the step issues,
// on the same groups CommStats records them on.
#pragma once

#include <memory>

#include "meshtrain/comm/comm_plan.h"
#include "meshtrain/core/memory_tracker.h"
#include "meshtrain/parallel/program.h"
#include "meshtrain/plan/engine_replay.h"
#include "meshtrain/plan/step_inputs.h"

namespace meshtrain::plan {

struct StepReplay {
  int rank = 0;
  int count = 1;  // ranks of the mesh this one stands for (same local spec, same program)
  std::shared_ptr<const parallel::LayoutPlan> plan;
  parallel::Program program;  // what the rank runs; the planned ops point into it
  MemorySnapshot at_rest;  // current bytes when the step starts (persistent state)
  MemorySnapshot peak;     // peaks during the step (MemoryTracker::reset_peaks at the start)
  comm::CommLedger comm;
  int live_micro_batches = 0;  // most micro-batches whose activations the rank held at once
};

// The schedule and the program the trainer runs on `plan`'s rank
// (trainer.cc). validated: the schedule was checked already (a prediction
// validates it once for all its rank classes).
parallel::Schedule train_schedule(const StepInputs& in);
parallel::Program train_program(const parallel::LayoutPlan& plan, const StepInputs& in, bool validated = false);

// Sizes of the step's bookkeeping collectives that depend on every pp x tp
// rank at `rank`'s data coordinate (the global norm's blocks, the pipeline
// timelines). The same for every rank of that coordinate: compute it once
// per prediction, not once per rank class.
struct ModelGroupLists {
  int64_t norm_blocks = 0, timeline_entries = 0;
};
ModelGroupLists model_group_lists(const StepInputs& in, int rank, bool schedule_validated = false);

// completion_lag: see engine_replay.h (bounds with 1 and kNeverCompletes).
// lists: model_group_lists(in, rank) when the caller has it.
StepReplay replay_step(const StepInputs& in, int rank, int completion_lag = 2, bool schedule_validated = false,
                       const ModelGroupLists* lists = nullptr);

}  // namespace meshtrain::plan
