// A pipeline timeline (timeline.h) drawn as a standalone SVG: one lane per
// stage, one box per chunk action (F, B, W, fused BW in their own colours,
// labelled with the micro-batch, and the chunk when a stage holds several),
// a time axis in milliseconds and a legend. The output is well-formed XML
// with no script or external reference, so `meshtrain timeline` writes it
// as a file and a report can inline it.
#pragma once

#include <string>

#include "meshtrain/parallel/timeline.h"

namespace meshtrain::parallel {

std::string timeline_svg(const PipelineTimeline& t, const std::string& title);

}  // namespace meshtrain::parallel
