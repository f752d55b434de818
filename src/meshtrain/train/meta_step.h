// One rank's real training step run on the meta device (core/meta_memory.h,
// kernels/meta/) over recording groups (comm/recording/): the planner's
// account of what a layout holds and sends, taken from the trainer's own
// code instead of a model of it (docs/planning.md). Nothing is computed or
// touched: the allocator rounds and accounts every tensor the step makes,
// the ledger writes down every collective and transfer with the program
// action and phase that issued it. MoE routing is the balanced assumption
// (kernels/moe_routing.h); every position of the window is supervised.
#pragma once

#include "meshtrain/plan/rank_step.h"
#include "meshtrain/plan/step_inputs.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// The config's [parallel] section is the mesh (dp 0 counts as 1).
// completion_lag: see plan::StepRecorder.
plan::RankStep record_step(const TrainConfig& cfg, int rank, int completion_lag = 2);
// The same for planner inputs (a config's, a mesh search's, a published run's).
plan::RankStep record_step(const plan::StepInputs& in, int rank, int completion_lag = 2);
// What plan::predict records steps with.
plan::StepRecorder meta_step_recorder();

// The training config a StepInputs describes (the trainer's view of it).
TrainConfig config_for(const plan::StepInputs& in);
// The mesh a config's [parallel] section describes (dp 0 counts as 1).
comm::MeshShape config_mesh(const TrainConfig& cfg);

}  // namespace meshtrain::train
