// The report's "Ranks" section (docs/comm.md, "Stragglers and hangs"):
// every rank's compute time per step (its step outside collective calls)
// as the median, fastest and slowest rank of each step; per rank, its mean
// step, compute and collective times and how often it was the slowest;
// and the stragglers the run named.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/report/run_log.h"

namespace meshtrain::report {

std::string ranks_section(const std::vector<RunLog>& runs);

}  // namespace meshtrain::report
