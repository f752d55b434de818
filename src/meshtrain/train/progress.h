// What rank 0 shows while training: the periodic log lines, and on a
// terminal one live status line below them (step/total, loss, tokens/s,
// MFU, ETA, peak memory) redrawn in place. When the console is not a
// terminal the output is the plain log lines only.
//
// It also writes the run record to metrics.jsonl (model, layout, precision,
// peak FLOP/s) so `meshtrain report` can label and normalize the curves.
// MFU is against the stable peak of train/peak_flops.h, never above 100%.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "meshtrain/core/status_line.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/peak_flops.h"

namespace meshtrain::train {

class Trainer;
struct TrainConfig;

// The precision choices of a run (docs/math.md, "Rule: precision is reported per role").
nlohmann::json precision_json(const Trainer& t);
// The whole model's parameter count (a rank's spec holds only its
// tensor-parallel slice and pipeline stages).
int64_t whole_model_parameters(const TrainConfig& cfg);
// {"event": "run", ...}: model, parameters (the whole model's), FLOPs/token,
// layout, precision, peak_gflops with how it was found ("peak"), start and
// total steps.
nlohmann::json run_record(Trainer& t, const PeakFlops& peak);
// {"event": "peak", ...}: the peak raised after `step` ran faster than it.
nlohmann::json peak_record(const PeakFlops& peak, int64_t step, double step_gflops);

class TrainProgress {
 public:
  // Finds the peak for MFU (cached, or measured once: peak_flops.h) and
  // writes the run record.
  TrainProgress(Trainer& t, std::FILE* console, MetricsWriter& writer);

  // After a step: raises the peak when the step ran faster than it (logged,
  // recorded and cached), then updates the live line (when live).
  void step_done(const StepMetrics& m);
  // A log line, printed above the live line.
  void log(const std::string& line) { line_.print(line); }
  void finish() { line_.finish(); }

  const PeakFlops& peak() const { return peak_; }
  // achieved / peak, in [0, 1] once step_done(m) has seen the step.
  double mfu(const StepMetrics& m) const { return peak_.total() > 0 ? m.gflops * 1e9 / peak_.total() : 0.0; }
  std::string status_text(const StepMetrics& m, double eta_s) const;

 private:
  StatusLine line_;
  MetricsWriter& writer_;
  PeakFlops peak_;
  int busy_cores_ = 1;  // this process's cores the run computes on (how the peak is measured)
  int64_t stop_step_ = 0, total_steps_ = 0;
  int64_t first_timed_step_ = -1;
  std::chrono::steady_clock::time_point first_timed_;
};

}  // namespace meshtrain::train
