// `meshtrain scale`: a short strong- or weak-scaling series on this
// machine (threads backend), the evidence docs/math.md asks for ("Scaling
// efficiency"). Every layout trains the same config for a few steps after
// one warm-up step; per layout: effective supervised tokens/s, step time,
// speedup and efficiency against the smallest runnable layout (named as
// the baseline, never an invented single-device time), peak memory,
// exposed communication and update count, with the planner's predicted
// step time beside the measured one when a machine profile is given. Like
// is compared with like, in one of two ways (the table says which):
//   same threads (default): every layout computes on the same T threads
//     (the cores this process may use), T / ranks per rank, so the series
//     compares layouts on the same cores: speedup = E = tokens/s over the
//     baseline's (the ideal is 1);
//   a device is N threads (threads_per_rank = N): a layout of D ranks
//     computes on D * N threads, speedup and E per (M.68) against D_base;
//     layouts needing more threads than there are cores are marked.
//   strong: the global batch of the config (its R * B * G rows) is held
//     fixed; each layout splits it over its replicas (plan::split_window);
//   weak: each replica keeps the config's B and G, so rows grow with R
//     (per device: E = t_baseline / t, (M.69); a larger batch changes
//     the trajectory).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/data/dataset.h"
#include "meshtrain/plan/hardware.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

struct ScalePoint {
  std::string layout;
  int devices = 1;                    // ranks
  int threads_per_rank = 1;           // compute threads of each rank
  bool ran = false;
  std::string error;                  // why it could not run
  int64_t rows = 0, micro_batch = 0, grad_accum = 0;
  double step_s = 0;                  // median of the measured steps (rank 0)
  double tokens_per_s = 0;            // supervised targets per second, median
  double exposed_s = 0;               // median of the largest exposed gradient/parameter wait of any rank
  int64_t peak_bytes = 0;             // largest total peak of any rank
  int64_t updates = 0;                // optimizer updates applied over the run (warm-up included)
  double loss = 0;                    // of the last step
  double speedup = 0, efficiency = 0;  // docs/math.md (M.68) against the baseline
  std::optional<double> predicted_step_s;
};

struct ScaleReport {
  bool weak = false;
  int steps = 0;
  int threads_per_rank = 0;  // 0: every layout on the same `threads`; else a device is this many threads
  int threads = 1;           // same-threads mode: the threads every layout computes on
  int cores = 1;             // the cores this process may use
  int baseline = -1;         // index of the smallest runnable layout
  std::vector<ScalePoint> points;
  // The tokens/s `p` would reach if it scaled perfectly from the baseline.
  double ideal_tokens_per_s(const ScalePoint& p) const;
  std::string table() const;
  nlohmann::json json() const;
};

// train_data: the dataset every layout reads (the config's, opened by the
// caller). threads_per_rank: 0 for the same threads in every layout (the
// cores this process may use), else the threads of one device.
ScaleReport run_scaling(const TrainConfig& cfg, const std::vector<Layout>& layouts, int steps, bool weak,
                        const data::TokenDataset& train_data, const plan::HardwareProfile* hw,
                        int threads_per_rank = 0);

}  // namespace meshtrain::train
