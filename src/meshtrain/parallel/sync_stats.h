// Per-window accounting of the data-parallel engine's communication.
#pragma once

#include <chrono>
#include <cstdint>

#include "meshtrain/comm/work.h"

namespace meshtrain::parallel {

struct GradSyncStats {
  double comm_s = 0;     // time the gradient/parameter collectives took (overlapped or not)
  double exposed_s = 0;  // time this rank waited on gradient/parameter communication
  int buckets = 0;       // gradient collectives launched this step
  int64_t bytes = 0;     // gradient bytes reduced this step
};

// Waits for `w`, counting the wait as exposed and the operation's own time
// as communication; leaves `w` empty.
inline void wait_timed(comm::Work& w, GradSyncStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  w.wait();
  stats.exposed_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats.comm_s += w.busy_seconds();
  w = comm::Work();
}

}  // namespace meshtrain::parallel
