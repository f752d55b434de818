// Checks of a checkpoint's metadata against its tensor set (docs/math.md,
// "Rule: restore claims": a restore verifies everything it relies on before
// using it). The manifest parser checks each tensor on its own; these check
// that the parts agree: metadata "step" equals the manifest's step, and the
// model that metadata "model_config" describes is exactly the stored parameter
// set (every parameter with its shape, no extra one), with optimizer moments
// ("optimizer.exp_avg.<param>", "optimizer.exp_avg_sq.<param>") only for those
// parameters and with their shapes.
#pragma once

#include <string>

#include "meshtrain/checkpoint/manifest.h"

namespace meshtrain::checkpoint {

inline constexpr const char* kExpAvgPrefix = "optimizer.exp_avg.";
inline constexpr const char* kExpAvgSqPrefix = "optimizer.exp_avg_sq.";

// CheckpointError naming `source`, the key or the tensor, and both values.
void check_metadata_consistency(const Manifest& m, const std::string& source);

}  // namespace meshtrain::checkpoint
