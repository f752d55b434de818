// Expert parallelism's config rules (parallel.ep with the model's experts),
// checked at config time with the arithmetic in the message.
#pragma once

#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

void check_expert_parallel_config(const TrainConfig& cfg);

}  // namespace meshtrain::train
