// What rank 0 shows while training: the periodic log lines, and on a
// terminal one live status line below them (step/total, loss, tokens/s,
// MFU, ETA, peak memory) redrawn in place. When the console is not a
// terminal the output is the plain log lines only.
//
// It also writes the run record to metrics.jsonl (model, layout, precision,
// peak FLOP/s) so `meshtrain report` can label and normalize the curves.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "meshtrain/core/status_line.h"
#include "meshtrain/train/metrics.h"

namespace meshtrain::train {

class Trainer;

// The precision choices of a run (SPEC S3: each one reported separately).
nlohmann::json precision_json(const Trainer& t);
// {"event": "run", ...}: model, parameters, FLOPs/token, layout, precision,
// peak_gflops, start and total steps.
nlohmann::json run_record(Trainer& t, double peak_gflops);

class TrainProgress {
 public:
  // Measures the FMA peak of the ranks (a ~50 ms register loop) for MFU and
  // writes the run record.
  TrainProgress(Trainer& t, std::FILE* console, MetricsWriter& writer);

  // Updates the live line after a step (nothing when not a terminal).
  void step_done(const StepMetrics& m);
  // A log line, printed above the live line.
  void log(const std::string& line) { line_.print(line); }
  void finish() { line_.finish(); }

  double peak_gflops() const { return peak_gflops_; }
  // achieved / peak, in [0, 1] (0 when the peak is unknown).
  double mfu(const StepMetrics& m) const { return peak_gflops_ > 0 ? m.gflops / peak_gflops_ : 0.0; }
  std::string status_text(const StepMetrics& m, double eta_s) const;

 private:
  StatusLine line_;
  double peak_gflops_ = 0;
  int64_t stop_step_ = 0, total_steps_ = 0;
  int64_t first_timed_step_ = -1;
  std::chrono::steady_clock::time_point first_timed_;
};

}  // namespace meshtrain::train
