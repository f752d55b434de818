#include "meshtrain/app/timeline.h"

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/timeline_svg.h"
#include "meshtrain/train/timeline_json.h"

namespace meshtrain::app {

TimelineResult timeline(const TimelineRequest& q) {
  const train::RecordedTimeline r = train::read_timeline(q.run_dir, q.step);
  TimelineResult out;
  out.out = q.out.empty()
                ? (std::filesystem::path(q.run_dir) / ("timeline-step" + std::to_string(r.step) + ".svg")).string()
                : q.out;
  const std::string title = "pipeline timeline: " + r.timeline.schedule + ", " +
                            std::to_string(r.timeline.stages.size()) + " stages, m = " +
                            std::to_string(r.timeline.micro_batches) + ", step " + std::to_string(r.step);
  std::ofstream f(out.out);
  MT_REQUIRE(ConfigError, f.good(), "cannot write '", out.out, "'");
  f << parallel::timeline_svg(r.timeline, title);
  out.summary = train::describe_timeline(r);
  return out;
}

}  // namespace meshtrain::app
