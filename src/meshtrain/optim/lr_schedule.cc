#include "meshtrain/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::optim {

const char* to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::Cosine: return "cosine";
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Linear: return "linear";
  }
  return "?";
}

void OptimizerConfig::validate() const {
  MT_REQUIRE(ConfigError, lr > 0, "optimizer.lr = ", lr, ": expected > 0");
  MT_REQUIRE(ConfigError, min_lr >= 0 && min_lr <= lr, "optimizer.min_lr = ", min_lr, ": expected 0 <= min_lr <= lr");
  MT_REQUIRE(ConfigError, beta1 >= 0 && beta1 < 1, "optimizer.beta1 = ", beta1, ": expected [0, 1)");
  MT_REQUIRE(ConfigError, beta2 >= 0 && beta2 < 1, "optimizer.beta2 = ", beta2, ": expected [0, 1)");
  MT_REQUIRE(ConfigError, eps > 0, "optimizer.eps = ", eps, ": expected > 0");
  MT_REQUIRE(ConfigError, weight_decay >= 0, "optimizer.weight_decay = ", weight_decay, ": expected >= 0");
  MT_REQUIRE(ConfigError, grad_clip >= 0, "optimizer.grad_clip = ", grad_clip, ": expected >= 0 (0 disables)");
  MT_REQUIRE(ConfigError, warmup_steps >= 0, "optimizer.warmup_steps = ", warmup_steps, ": expected >= 0");
}

double LrSchedule::at(int64_t step) const {
  if (cfg_.warmup_steps > 0 && step < cfg_.warmup_steps)
    return cfg_.lr * double(step + 1) / double(cfg_.warmup_steps);
  if (cfg_.schedule == ScheduleKind::Constant) return cfg_.lr;
  const int64_t span = std::max<int64_t>(1, total_ - cfg_.warmup_steps);
  const double t = std::clamp(double(step - cfg_.warmup_steps) / double(span), 0.0, 1.0);
  const double w = cfg_.schedule == ScheduleKind::Cosine ? 0.5 * (1.0 + std::cos(M_PI * t)) : 1.0 - t;
  return cfg_.min_lr + (cfg_.lr - cfg_.min_lr) * w;
}

}  // namespace meshtrain::optim
