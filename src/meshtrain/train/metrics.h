// Per-step metrics: one console line and one JSONL record per step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "meshtrain/core/memory_tracker.h"
#include "meshtrain/model/ring_attention.h"
#include "meshtrain/train/moe_metrics.h"
#include "meshtrain/train/rank_timing.h"
#include "meshtrain/train/straggler.h"
#include "meshtrain/train/tp_metrics.h"

namespace meshtrain::train {

// The context-parallel ring of one step on this rank (empty without it):
// K/V bytes sent, forward (docs/math.md (M.51): 2 b s h_kv bytes
// (cp - 1) / cp per layer) and backward (K/V again plus dK/dV), the time
// spent waiting for blocks, and the chunk pairs computed or skipped.
struct CpMetrics {
  int cp = 1;
  model::CpCommStats ring;
  nlohmann::json to_json() const;
};
CpMetrics cp_metrics(const model::CpCommStats& stats, int cp);

struct StepMetrics {
  int64_t step = 0;            // 1-based index of this update
  bool skipped = false;        // N = 0 or non-finite gradients
  std::string skip_reason;
  double loss = 0;             // (1/N) sum S, docs/math.md (M.4), (M.8)
  int64_t supervised = 0;      // N
  int64_t non_pad_tokens = 0;
  int64_t computed_positions = 0;
  double padding_ratio = 0;    // docs/math.md (M.2), over the window
  double seconds = 0;
  double collective_s = 0;     // part of seconds this rank spent inside collective calls
  double tokens_per_s = 0;     // supervised tokens per second
  double gflops = 0;           // achieved model GFLOP/s
  double grad_norm = 0;        // before clipping
  double clip_coef = 1;
  double lr = 0;
  double comm_s = 0;           // time the gradient/parameter collectives took
  double comm_exposed_s = 0;   // part of it this rank waited for (not overlapped)
  int comm_buckets = 0;        // gradient collectives launched
  int64_t comm_bytes = 0;      // gradient bytes reduced
  double loss_scale = 1;       // fp16 loss scale this step ran with (1: none)
  int64_t skipped_total = 0;   // steps skipped for non-finite gradients so far
  double pipeline_bubble = -1;          // measured idle share of the pipeline stages (-1: one stage)
  double pipeline_bubble_formula = -1;  // the schedule's unit-time bubble
  // Pipeline receives: this rank's wait at them, and the part of it after
  // the sender had finished the message's action (the transfer it could
  // not hide, timeline.h); -1: one stage.
  double pipeline_receive_wait_s = -1;
  double pipeline_transfer_exposed_s = -1;
  TpMetrics tp;                         // tensor-parallel communication (empty without it)
  CpMetrics cp;                         // context-parallel ring (empty without it)
  MoeMetrics moe;                       // mixture-of-experts routing (inactive without experts)
  MemorySnapshot memory;
  RankTimes ranks;                      // every rank's times (the run loop gathers them; empty before)
  std::vector<Straggler> stragglers;    // ranks named after this step (rank 0's run loop)
  nlohmann::json to_json() const;
  std::string console_line(int64_t total_steps) const;
};

// Appends one JSON record per line. A failed write (full disk, I/O error)
// is never silent: the first one prints a warning on stderr, and failed()
// lets the run end with an error once its checkpoints are safe.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& jsonl_path);  // "" disables the file
  void write(const nlohmann::json& record);
  bool failed() const { return lost_ > 0; }
  int64_t lost_records() const { return lost_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
  int64_t lost_ = 0;
};

// Resuming at `step`: drops the records of steps after it (they are run
// again) and any torn last line, keeping restart events and records
// without a step. Returns the highest step dropped (0 if none). The file
// is replaced atomically; a missing file is fine.
int64_t truncate_metrics_after(const std::string& jsonl_path, int64_t step);

}  // namespace meshtrain::train
