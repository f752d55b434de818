// Optimizer and learning-rate schedule settings ([optimizer] in TOML).
#pragma once

#include <cstdint>

namespace meshtrain::optim {

enum class ScheduleKind { Cosine, Constant, Linear };

struct OptimizerConfig {
  double lr = 3e-4;
  double min_lr = 3e-5;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global-norm clip; 0 disables
  int64_t warmup_steps = 0;
  ScheduleKind schedule = ScheduleKind::Cosine;
  void validate() const;  // throws ConfigError with the key path
};

const char* to_string(ScheduleKind k);

}  // namespace meshtrain::optim
