// What the planner needs of a training config (plan/step_inputs.h): the
// model, the layout the trainer would build, the engine settings, the
// precision policy and the window's shape, so `meshtrain plan` and the
// validation tests predict exactly the run the config describes.
#pragma once

#include "meshtrain/plan/step_inputs.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// The config as it would run (its [parallel] section; dp 0 counts as 1).
plan::StepInputs step_inputs(const TrainConfig& cfg);
// The config with `layout` in place of its [parallel] section.
plan::StepInputs step_inputs(const TrainConfig& cfg, const Layout& layout);

}  // namespace meshtrain::train
