// The training job around the step (SPEC Algorithm 29.1 lives in
// trainer.cc): resume or initialize, the header lines, the loop of steps
// with logging, evaluation and checkpoints (run_training), and the entry
// that launches the ranks of a configured layout (train_main).
#pragma once

#include <cstdio>

#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

// Runs cfg.training.steps updates (or up to training.stop_at); logs to
// `console` (null: silent, as on ranks other than 0).
void run_training(Trainer& trainer, std::FILE* console);

// The mesh a config asks for. parallel.dp = 0 takes dp from `world_size`
// (what mpirun started); any other value must multiply with the other axes
// to exactly the world size, or ConfigError names both numbers.
comm::MeshShape mesh_for(const TrainConfig& cfg, int world_size);

// Opens cfg.data.path (rank 0 prepares it from cfg.data.sources first if
// needed) and runs a training job on the configured backend and layout.
void train_main(const TrainConfig& cfg);

}  // namespace meshtrain::train
