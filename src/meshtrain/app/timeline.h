// `meshtrain timeline RUN_DIR`: a recorded pipeline timeline drawn as SVG,
// with the measured bubble next to the formula and the costed simulation.
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain::app {

struct TimelineRequest {
  std::string run_dir;
  int64_t step = -1;  // < 0: the latest recorded step
  std::string out;    // "": RUN_DIR/timeline-stepK.svg
  bool force = false;  // replace an existing output file (core/output_file.h)
};
struct TimelineResult {
  std::string out;      // the SVG written
  std::string summary;  // bubble measured / formula / costed, F B W per chunk
};
// DataError naming the file when the run recorded no timeline (for that step).
TimelineResult timeline(const TimelineRequest& request);

}  // namespace meshtrain::app
