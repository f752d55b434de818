// Per-window accounting of the data-parallel engine's communication.
#pragma once

#include <chrono>
#include <cstdint>

#include "meshtrain/comm/work.h"

namespace meshtrain::parallel {

struct GradSyncStats {
  double comm_s = 0;     // time the gradient/parameter collectives were in flight (overlapped or not)
  double exposed_s = 0;  // of that, the time this rank waited for them (<= comm_s)
  int buckets = 0;       // gradient collectives launched this step
  int64_t bytes = 0;     // gradient bytes reduced this step
};

// Waits for `w`, counting its time in flight (issue to completion) as
// communication and the wait until it completed as exposed: exposed <=
// total by construction, and a finished operation (every one of a group of
// one) exposes nothing however long the wait call itself takes. Leaves `w`
// empty.
inline void wait_timed(comm::Work& w, GradSyncStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  w.wait();
  stats.exposed_s += w.seconds_until_done(t0);
  stats.comm_s += w.in_flight_seconds();
  w = comm::Work();
}

}  // namespace meshtrain::parallel
