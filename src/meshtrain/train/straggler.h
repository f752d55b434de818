// Naming stragglers from every rank's step times (rank_timing.h; docs/comm.md,
// "Stragglers and hangs"). A rank is slow in a step when its compute time
// (its step minus its time inside collectives) is at least `factor` times
// the median rank's and exceeds it by at least kMinExcessSeconds; it is
// named a straggler once it has been slow for kSteps consecutive steps, and
// stays named until a step where it is not slow. One slow step (a page
// fault storm, a noisy neighbour) names nobody.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/train/rank_timing.h"

namespace meshtrain::train {

struct Straggler {
  int rank = 0;
  std::string host;
  double ratio = 0;             // compute / median compute, this step
  double compute_s = 0, median_compute_s = 0;
  int64_t steps = 0;            // consecutive slow steps so far
  nlohmann::json to_json() const;
};

class StragglerWatch {
 public:
  static constexpr int kSteps = 3;
  static constexpr double kMinExcessSeconds = 0.01;

  // factor 0: off (observe names nobody). hosts: by world rank.
  StragglerWatch(double factor, std::vector<std::string> hosts);
  // One step's times: the ranks named after it. `changes` receives one
  // line per rank newly named or no longer named (for the log).
  std::vector<Straggler> observe(const RankTimes& times, std::vector<std::string>& changes);

 private:
  double factor_;
  std::vector<std::string> hosts_;
  std::vector<int64_t> slow_steps_;  // per rank: consecutive slow steps
};

}  // namespace meshtrain::train
