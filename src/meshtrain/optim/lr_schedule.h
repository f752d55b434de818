// Learning rate per update: linear warmup to lr, then cosine (or linear)
// decay to min_lr at total_steps, or constant.
#pragma once

#include <cstdint>

#include "meshtrain/optim/optimizer_config.h"

namespace meshtrain::optim {

class LrSchedule {
 public:
  LrSchedule(const OptimizerConfig& cfg, int64_t total_steps) : cfg_(cfg), total_(total_steps) {}
  // LR of the update with 0-based index `step`.
  double at(int64_t step) const;

 private:
  OptimizerConfig cfg_;
  int64_t total_;
};

}  // namespace meshtrain::optim
