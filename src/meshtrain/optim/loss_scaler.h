// Dynamic loss scaling for fp16 training (docs/math.md (M.14), (M.18)): the
// loss coefficient is multiplied by `scale` so small gradients survive f16's
// range; gradients are unscaled before the norm and the clip (the optimizer
// folds 1/scale into its gradient multiplier). A step whose gradients are
// not finite on any rank is skipped by every rank (the flag is reduced over
// the world first) and the scale backs off once `hysteresis` such steps have
// been seen since the last back-off; after `growth_interval` finite steps in
// a row it grows. The state is part of a checkpoint, so resume is exact.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace meshtrain::optim {

struct LossScaleConfig {
  double initial = 65536.0;     // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;  // finite steps in a row before growing
  int64_t hysteresis = 2;          // non-finite steps tolerated before backing off
  double min_scale = 1.0;
  void validate() const;  // ConfigError naming the training.loss_scale_* key
};

class LossScaler {
 public:
  // enabled = false: scale 1, never changes (fp32 and bf16 policies).
  LossScaler(const LossScaleConfig& cfg, bool enabled);
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  // Record one step's joint decision (the same on every rank).
  void update(bool found_nonfinite);
  int64_t skipped() const { return skipped_; }

  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  LossScaleConfig cfg_;
  bool enabled_;
  double scale_;
  int64_t good_steps_ = 0;  // finite steps since the last change
  int64_t bad_left_;        // non-finite steps still tolerated before backing off
  int64_t skipped_ = 0;     // non-finite steps so far
};

}  // namespace meshtrain::optim
