// Every rank's time of one step, gathered at the step's end with one small
// all-gather over the world (two numbers per rank) and written by rank 0
// into the step's metrics record (docs/comm.md, "Stragglers and hangs"):
// the step time and the part of it spent inside collective calls; the rest
// is the rank's own compute. A slow rank shows as more compute; its peers
// as more time in collectives, waiting for it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/comm/process_group.h"

namespace meshtrain::train {

struct RankTimes {
  std::vector<double> step_s;        // per rank
  std::vector<double> collective_s;  // per rank: inside collective calls
  bool empty() const { return step_s.empty(); }
  int ranks() const { return int(step_s.size()); }
  double compute_s(int rank) const;  // step - collective, >= 0
  // The lower middle value of an even count: of two ranks the faster one,
  // so the slower one's ratio is against its peer.
  double median_compute_s() const;
  int slowest() const;               // the rank with the most compute (the lowest on ties)
  // {"step_s": [...], "compute_s": [...], "median_compute_s", "slowest"}
  nlohmann::json to_json() const;
};

// Collective over `world`.
RankTimes gather_rank_times(comm::ProcessGroup& world, double step_s, double collective_s);

// Every rank's host name, by world rank. Collective over `world` (once per run).
std::vector<std::string> gather_hosts(comm::ProcessGroup& world);

}  // namespace meshtrain::train
