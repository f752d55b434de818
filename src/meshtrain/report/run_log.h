// A training run as recorded in RUN_DIR/metrics.jsonl (train/run.cc): the
// run record (model, layout, precision, peak FLOP/s), one record per step,
// evaluations, and pipeline timelines when a schedule recorded them.
// A resumed run appends to the same file: the latest record of a step wins.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshtrain::report {

// A rank named a straggler after a step (train/straggler.h).
struct StragglerMark {
  int rank = 0;
  std::string host;
  double ratio = 0;
};

struct StepRecord {
  int64_t step = 0;
  double tokens = 0;  // supervised tokens consumed up to and including this step
  double loss = 0, tokens_per_s = 0, gflops = 0, grad_norm = 0, lr = 0;
  double comm_s = 0, comm_exposed_s = 0, seconds = 0;
  bool skipped = false;
  std::string skip_reason;
  std::map<std::string, double> peak_memory;  // category -> bytes
  // Every rank's step time and compute time (its step outside collective
  // calls); empty in runs that did not record them.
  std::vector<double> rank_step_s, rank_compute_s;
  std::vector<StragglerMark> stragglers;
};

// A launch that resumed the run: after a failure (a restart) or at another
// layout (an elastic membership change, train/elastic.h), or both.
struct ResumeRecord {
  int64_t resumed_step = 0, lost_steps = 0;
  std::string change;  // "4 ranks: dp=4, grad_accum=1 -> 2 ranks: ..."; "" for a restart at the same layout
  std::string reason;
  int ranks = 0, dp = 0, grad_accum = 0;  // the layout it continued at (membership changes)
  std::string layout;  // as the trainer describes it ("3 ranks: dp=3, grad_accum=3+3+2"; older logs: none)
  double recovery_s = -1;  // from the end of the last launch to this one ready to train; -1: not recorded
};

struct EvalRecord {
  int64_t step = 0;
  double tokens = 0;
  double val_loss = 0, bits_per_byte = -1;  // -1: not recorded
};

// One span of a pipeline schedule: stage s ran micro-batch m's forward (F)
// or backward (B) between start_s and end_s (seconds from the step start).
struct PipelineOp {
  int stage = 0, micro = 0;
  std::string kind;
  double start_s = 0, end_s = 0;
};

struct RunLog {
  std::string dir, name;
  nlohmann::json run = nlohmann::json::object();  // the latest "run" record
  double unigram_entropy = -1;
  std::vector<StepRecord> steps;  // by step
  std::vector<EvalRecord> evals;  // by step
  std::vector<ResumeRecord> resumes;  // in the order they happened
  int64_t pipeline_step = -1;     // the step of the latest recorded timeline
  std::vector<PipelineOp> pipeline;
  // The peak MFU divides by (docs/cli.md, "Reports"): the highest rate these
  // cores were measured at — the run record's peak, any later "peak" event
  // (a step ran faster and the run raised it), and the steps' own rates —
  // so every step's MFU is <= 100%, whatever wrote the file. 0: unknown.
  double peak = 0;
  bool peak_from_steps = false;  // a step ran faster than every recorded peak
  double peak_gflops() const { return peak; }
};

// Reads RUN_DIR/metrics.jsonl. DataError naming file:line for a line that
// is not a JSON object, or when the file is missing or has no steps.
RunLog read_run(const std::string& run_dir);

}  // namespace meshtrain::report
