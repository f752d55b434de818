// Context-parallel shape rules of a run, checked when the config is
// validated, before any rank starts: every row cuts into 2 cp equal chunks
// (the causal load balance of model/ring_attention.h), and under sequence
// parallelism each rank's share still splits over tp.
#pragma once

#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// ConfigError naming the keys and the arithmetic.
void check_context_parallel_config(const TrainConfig& cfg);

// The multiple every window's sequence length must be (the loader rounds
// padded windows up to it): tp under sequence parallelism, times 2 cp.
int64_t sequence_multiple(const TrainConfig& cfg);

}  // namespace meshtrain::train
