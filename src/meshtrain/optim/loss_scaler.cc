#include "meshtrain/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::optim {

void LossScaleConfig::validate() const {
  MT_REQUIRE(ConfigError, std::isfinite(initial) && initial >= 1, "training.loss_scale = ", initial,
             ": expected a finite value >= 1");
  MT_REQUIRE(ConfigError, std::isfinite(growth_factor) && growth_factor > 1, "training.loss_scale_growth = ",
             growth_factor, ": expected > 1");
  MT_REQUIRE(ConfigError, backoff_factor > 0 && backoff_factor < 1, "training.loss_scale_backoff = ", backoff_factor,
             ": expected 0 < backoff < 1");
  MT_REQUIRE(ConfigError, growth_interval >= 1, "training.loss_scale_window = ", growth_interval, ": expected >= 1");
  MT_REQUIRE(ConfigError, hysteresis >= 1, "training.loss_scale_hysteresis = ", hysteresis, ": expected >= 1");
  MT_REQUIRE(ConfigError, std::isfinite(min_scale) && min_scale > 0 && min_scale <= initial,
             "training.loss_scale_min = ", min_scale, ": expected 0 < min <= training.loss_scale");
}

LossScaler::LossScaler(const LossScaleConfig& cfg, bool enabled)
    : cfg_(cfg), enabled_(enabled), scale_(enabled ? cfg.initial : 1.0), bad_left_(cfg.hysteresis) {}

void LossScaler::update(bool found_nonfinite) {
  if (found_nonfinite) ++skipped_;
  if (!enabled_) return;
  if (found_nonfinite) {
    good_steps_ = 0;
    if (--bad_left_ <= 0) {
      scale_ = std::max(cfg_.min_scale, scale_ * cfg_.backoff_factor);
      bad_left_ = cfg_.hysteresis;
    }
    return;
  }
  if (++good_steps_ >= cfg_.growth_interval) {
    scale_ *= cfg_.growth_factor;
    good_steps_ = 0;
    bad_left_ = cfg_.hysteresis;
  }
}

nlohmann::json LossScaler::state() const {
  return {{"enabled", enabled_}, {"scale", scale_}, {"good_steps", good_steps_}, {"bad_left", bad_left_},
          {"skipped", skipped_}};
}

void LossScaler::restore(const nlohmann::json& s) {
  MT_REQUIRE(CheckpointError, s.is_object() && s.contains("scale"), "checkpoint loss_scaler state is malformed");
  scale_ = s.at("scale").get<double>();
  good_steps_ = s.value("good_steps", int64_t(0));
  bad_left_ = s.value("bad_left", cfg_.hysteresis);
  skipped_ = s.value("skipped", int64_t(0));
}

}  // namespace meshtrain::optim
