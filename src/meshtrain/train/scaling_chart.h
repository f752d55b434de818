// The scaling series as an SVG chart (self-contained, no script): measured
// supervised tokens/s per layout against the ideal line from the baseline,
// and the efficiency (docs/math.md (M.68)) of each point, one column per layout.
#pragma once

#include <string>

#include "meshtrain/train/scaling.h"

namespace meshtrain::train {

std::string scaling_svg(const ScaleReport& report);

}  // namespace meshtrain::train
