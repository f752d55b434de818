#include "meshtrain/train/straggler.h"

#include <cstdio>

namespace meshtrain::train {

nlohmann::json Straggler::to_json() const {
  return {{"rank", rank},          {"host", host},     {"ratio", ratio}, {"compute_s", compute_s},
          {"median_compute_s", median_compute_s}, {"steps", steps}};
}

StragglerWatch::StragglerWatch(double factor, std::vector<std::string> hosts)
    : factor_(factor), hosts_(std::move(hosts)), slow_steps_(hosts_.size(), 0) {}

std::vector<Straggler> StragglerWatch::observe(const RankTimes& times, std::vector<std::string>& changes) {
  std::vector<Straggler> named;
  if (factor_ <= 0 || times.ranks() < 2) return named;
  const double median = times.median_compute_s();
  for (int r = 0; r < times.ranks() && size_t(r) < slow_steps_.size(); ++r) {
    const double c = times.compute_s(r);
    const bool slow = median > 0 && c >= factor_ * median && c - median >= kMinExcessSeconds;
    const int64_t before = slow_steps_[size_t(r)];
    slow_steps_[size_t(r)] = slow ? before + 1 : 0;
    const std::string& host = hosts_[size_t(r)];
    const double ratio = median > 0 ? c / median : 1;
    char line[320];
    if (!slow) {
      if (before >= kSteps) {
        std::snprintf(line, sizeof line, "rank %d (host %s) is no longer a straggler: compute %.3g s, %.2fx the "
                      "median %.3g s", r, host.c_str(), c, ratio, median);
        changes.emplace_back(line);
      }
      continue;
    }
    if (slow_steps_[size_t(r)] < kSteps) continue;
    named.push_back({r, host, ratio, c, median, slow_steps_[size_t(r)]});
    if (slow_steps_[size_t(r)] == kSteps) {
      std::snprintf(line, sizeof line, "warning: rank %d (host %s) is a straggler: compute %.3g s per step, %.2fx the "
                    "median rank's %.3g s, for %d steps in a row (comm.straggler_factor = %g)", r, host.c_str(), c,
                    ratio, median, kSteps, factor_);
      changes.emplace_back(line);
    }
  }
  return named;
}

}  // namespace meshtrain::train
