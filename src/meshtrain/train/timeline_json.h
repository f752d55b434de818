// Pipeline timelines in the run's metrics.jsonl: one record per logged
// step when metrics.pipeline_timeline = true,
//   {"event": "pipeline_timeline", "step": k, "schedule": "1f1b",
//    "stages": p, "micro_batches": m, "virtual_stages": v,
//    "bubble": measured, "bubble_formula": f,
//    "ops": [{"stage", "chunk", "micro", "kind": "F"|"B"|"W"|"BW",
//             "start_s", "end_s", "busy_s"}, ...]}
// (times from the window's start), and reading them back.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "meshtrain/parallel/timeline.h"

namespace meshtrain::train {

nlohmann::json timeline_record(int64_t step, const parallel::PipelineTimeline& t, double bubble_formula);

struct RecordedTimeline {
  int64_t step = 0;
  double bubble_formula = 0;
  parallel::PipelineTimeline timeline;
};
// The record of `step` in RUN_DIR/metrics.jsonl (step < 0: the latest).
// DataError naming the file when it is missing or holds no such record.
RecordedTimeline read_timeline(const std::string& run_dir, int64_t step = -1);

// The measured bubble next to the schedule's formula and the costed
// simulation of the same schedule with the measured median F, B, W of each
// chunk (transfers free), and those medians.
std::string describe_timeline(const RecordedTimeline& r);

}  // namespace meshtrain::train
