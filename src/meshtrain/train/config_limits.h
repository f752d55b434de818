// Bounds on every number and name of a TrainConfig, checked before anything
// is derived from them: integers that would overflow a product, allocate
// without end or start a thread per rank without limit, floating-point
// values that are not finite or not sane, and names that are not UTF-8
// (they go into JSON metadata). Each failure is a ConfigError naming the
// key, its value and the accepted range.
#pragma once

namespace meshtrain::train {

struct TrainConfig;

// Called by TrainConfig::validate() before the model config is finalized.
void check_config_limits(const TrainConfig& cfg);

}  // namespace meshtrain::train
