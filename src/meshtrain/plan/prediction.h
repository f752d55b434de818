// Everything `meshtrain plan` predicts for a layout, per rank class: ranks
// holding the same local spec (same pipeline segments, same tensor-parallel
// piece sizes) run the same step, so one recorded step (rank_step.h)
// stands for each class.
// Memory at rest and peak per category (with the bracket of reduction
// timing), the largest ZeRO-3 unit, micro-batches in flight, every
// collective of the step, FLOPs, and with a machine profile the step time.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshtrain/plan/hardware.h"
#include "meshtrain/plan/rank_step.h"
#include "meshtrain/plan/step_time.h"

namespace meshtrain::plan {

struct RankClass {
  RankStep step;                   // non-blocking collectives finishing at their second completion test
  MemorySnapshot peak_low, peak_high;  // reductions done at once / only when waited for
  int pp = 0, tp = 0;              // the representative's coordinates
  int64_t largest_unit_bytes = 0;  // U of docs/math.md (M.28): the biggest unit a ZeRO-3 gather holds
  double flops = 0;                // executed per step by one rank of the class
};

struct Prediction {
  StepInputs inputs;
  std::vector<RankClass> classes;
  double model_flops_per_step = 0;     // model::model_flops_per_token x tokens
  double executed_flops_per_step = 0;  // every rank, recomputation included
  std::optional<HardwareProfile> hardware;
  std::optional<StepTime> time;
  // What the recorded step assumes beyond the layout (MoE routing).
  std::vector<std::string> assumptions;
  int64_t peak_bytes() const;          // the largest total peak of any class
  bool fits() const;                   // peak within the profile's device memory
};

// What a recorded step of `in` assumes (Prediction::assumptions).
std::vector<std::string> assumptions(const StepInputs& in);

// record: the train layer's meta-device step (train/meta_step.h).
// brackets: also record the timing extremes of the communication buffers
// (two more recorded steps per class; mesh searches skip them).
Prediction predict(const StepInputs& in, const StepRecorder& record, const HardwareProfile* hw = nullptr,
                   bool brackets = true);

}  // namespace meshtrain::plan
