// Settings that would change nothing in the run they are given to are
// refused, never ignored (docs/errors.md: no silent fallback): dynamic loss
// scaling outside fp16, ZeRO-3's options under another stage, sequence
// parallelism without tensor parallelism. Checked where a user states them
// (a config file with its --set overrides, a --layout); programs that build
// configs themselves are not held to it.
#pragma once

namespace meshtrain::parallel {
struct ParallelConfig;
}

namespace meshtrain::train {

struct TrainConfig;

// ConfigError naming the key, why it has no effect and what would give it one.
void check_parallel_options_take_effect(const parallel::ParallelConfig& p);
void check_options_take_effect(const TrainConfig& cfg);  // the above and [training]

}  // namespace meshtrain::train
