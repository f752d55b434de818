#include "meshtrain/app/timeline.h"

#include <filesystem>

#include "meshtrain/core/output_file.h"
#include "meshtrain/parallel/timeline_svg.h"
#include "meshtrain/train/timeline_json.h"

namespace meshtrain::app {

TimelineResult timeline(const TimelineRequest& q) {
  const std::string metrics = (std::filesystem::path(q.run_dir) / "metrics.jsonl").string();
  if (!q.out.empty()) check_output_file(q.out, {metrics}, q.force, "--force");  // before any work
  const train::RecordedTimeline r = train::read_timeline(q.run_dir, q.step);
  TimelineResult out;
  out.out = q.out.empty()
                ? (std::filesystem::path(q.run_dir) / ("timeline-step" + std::to_string(r.step) + ".svg")).string()
                : q.out;
  if (q.out.empty()) check_output_file(out.out, {metrics}, q.force, "--force");
  const std::string title = "pipeline timeline: " + r.timeline.schedule + ", " +
                            std::to_string(r.timeline.stages.size()) + " stages, m = " +
                            std::to_string(r.timeline.micro_batches) + ", step " + std::to_string(r.step);
  write_file_atomically(out.out, parallel::timeline_svg(r.timeline, title));
  out.summary = train::describe_timeline(r);
  return out;
}

}  // namespace meshtrain::app
