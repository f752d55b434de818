// The timeout watchdog: MPI cannot wake a peer blocked inside MPI, so a
// thread watches every blocking call and every waited non-blocking one, and
// ends the job with a message naming the op once its deadline plus a grace
// has passed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm::mpi {

using Clock = std::chrono::steady_clock;

// What the watchdog needs to name a stuck op; the text is only built when
// it fires (formatting per call would cost a microsecond).
struct Watch {
  Clock::time_point deadline;
  std::string what;  // preformatted, or empty: format from the fields
  const std::string* group = nullptr;
  OpKind kind = OpKind::Barrier;
  uint64_t seq = 0, count = 0;
  int rank = -1;
  std::string str() const;
};

// Registers `w` for the guard's lifetime.
class WatchGuard {
 public:
  explicit WatchGuard(Watch w);
  WatchGuard(Clock::time_point deadline, std::string what) : WatchGuard(Watch{deadline, std::move(what)}) {}
  ~WatchGuard();
  WatchGuard(const WatchGuard&) = delete;
  WatchGuard& operator=(const WatchGuard&) = delete;

 private:
  uint64_t id_;
};

// A grace after the deadline lets Work::wait report CommTimeout first.
inline constexpr auto kWatchdogGrace = std::chrono::seconds(5);

void start_watchdog();
void stop_watchdog();

}  // namespace meshtrain::comm::mpi
