// `meshtrain scale`: a short strong- or weak-scaling series on this machine
// (threads backend, one compute thread per rank unless training.threads
// says otherwise: a device is a core), the evidence S10 asks for. Every layout trains the same
// config for a few steps after one warm-up step; per layout: effective
// supervised tokens/s, step time, efficiency (29.17) against the smallest
// runnable layout (named as the baseline, never an invented single-device
// time), peak memory, exposed communication and update count, with the
// planner's predicted step time beside the measured one when a machine
// profile is given.
//   strong: the global batch of the config (its R * B * G rows) is held
//     fixed; each layout splits it over its replicas (plan::split_window);
//   weak: each replica keeps the config's B and G, so rows grow with R and
//     E = t_baseline / t (a larger batch changes the trajectory: S10).
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
  int devices = 1;
  bool ran = false;
  std::string error;                  // why it could not run
  int64_t rows = 0, micro_batch = 0, grad_accum = 0;
  double step_s = 0;                  // median of the measured steps (rank 0)
  double tokens_per_s = 0;            // supervised targets per second, median
  double exposed_s = 0;               // median of the largest exposed gradient/parameter wait of any rank
  int64_t peak_bytes = 0;             // largest total peak of any rank
  int64_t updates = 0;                // optimizer updates applied over the run (warm-up included)
  double loss = 0;                    // of the last step
  double speedup = 0, efficiency = 0;  // (29.17) against the baseline
  std::optional<double> predicted_step_s;
};

struct ScaleReport {
  bool weak = false;
  int steps = 0;
  int baseline = -1;  // index of the smallest runnable layout
  std::vector<ScalePoint> points;
  std::string table() const;
  nlohmann::json json() const;
};

// train_data: the dataset every layout reads (the config's, opened by the caller).
ScaleReport run_scaling(const TrainConfig& cfg, const std::vector<Layout>& layouts, int steps, bool weak,
                        const data::TokenDataset& train_data, const plan::HardwareProfile* hw);

}  // namespace meshtrain::train
