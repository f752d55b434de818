// The training job around the step (docs/math.md, Algorithm 1, lives in
// training_step.cc): resume or initialize, the header lines, the loop of steps
// with logging, evaluation, checkpoints and a clean stop on SIGINT/SIGTERM
// (run_training), and the entry that launches the ranks of a configured
// layout and restarts a failed job (train_main, supervisor.h).
#pragma once

#include <cstdio>

#include "meshtrain/train/supervisor.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

// Stopped: a signal asked to stop; Regrow: an elastic job's capacity
// changed, and it saved its state at a step boundary to continue at another
// layout (elastic.h). The state was saved in both.
enum class RunEnd { Finished, Stopped, Regrow };

// Runs cfg.training.steps updates (or up to training.stop_at); logs to
// `console` (null: silent, as on ranks other than 0). Collective. Throws
// TrainingError when every step it ran was skipped or its metrics could
// not be written (after its checkpoints are safe).
RunEnd run_training(Trainer& trainer, std::FILE* console, const RestartInfo& restart = {});

// The mesh a config asks for. parallel.dp = 0 takes dp from `world_size`
// (what mpirun started); any other value must multiply with the other axes
// to exactly the world size, or ConfigError names both numbers.
comm::MeshShape mesh_for(const TrainConfig& cfg, int world_size);

// Opens cfg.data.path (rank 0 prepares it from cfg.data.sources first if
// needed) and runs a training job on the configured backend and layout,
// restarting it on failure when comm.restart_on_failure. Returns the exit
// code: 0, or 128 + signal when a signal stopped it (after saving).
int train_main(const TrainConfig& cfg);

}  // namespace meshtrain::train
