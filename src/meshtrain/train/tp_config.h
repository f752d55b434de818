// Tensor- and sequence-parallel shape rules of a run, checked when the config
// is validated, before any rank starts: query heads whole per rank, KV heads
// split or shared whole (docs/math.md (M.38): never a rounded-down head
// count), every tensor-parallel split placeable (vocabulary rows, hidden
// columns), and under sequence parallelism a sequence that splits over tp.
#pragma once

#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// ConfigError naming the keys and the arithmetic.
void check_tensor_parallel_config(const TrainConfig& cfg);

}  // namespace meshtrain::train
