#include "meshtrain/comm/mpi/mpi_watchdog.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "meshtrain/comm/mpi/mpi_runtime.h"

namespace meshtrain::comm::mpi {
namespace {

struct Watchdog {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Watch> inflight;
  uint64_t next_id = 0;
  bool stop = false;
  std::thread thread;
};

Watchdog& wd() {
  static Watchdog w;
  return w;
}

void watchdog_loop() {
  Watchdog& w = wd();
  std::unique_lock<std::mutex> lock(w.mu);
  while (!w.stop) {
    w.cv.wait_for(lock, std::chrono::milliseconds(200));
    const auto now = Clock::now();
    for (auto& [id, e] : w.inflight)
      if (now > e.deadline + kWatchdogGrace)
        abort_job(detail::concat("meshtrain comm (world rank ", rt().world_rank, "): ", e.str(),
                                 "; MPI cannot wake peers, aborting all ranks"),
                  124);
  }
}

}  // namespace

std::string Watch::str() const {
  if (!what.empty()) return what;
  return detail::concat("group '", *group, "' ", op_kind_name(kind), "(seq=", seq, ", count=", count, ") at rank ",
                        rank, " timed out (MPI cannot tell which peer is missing)");
}

WatchGuard::WatchGuard(Watch w) {
  std::lock_guard<std::mutex> lock(wd().mu);
  id_ = wd().next_id++;
  wd().inflight.emplace(id_, std::move(w));
}

WatchGuard::~WatchGuard() {
  std::lock_guard<std::mutex> lock(wd().mu);
  wd().inflight.erase(id_);
}

void start_watchdog() {
  std::lock_guard<std::mutex> lock(wd().mu);
  wd().stop = false;
  if (!wd().thread.joinable()) wd().thread = std::thread(watchdog_loop);
}

void stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(wd().mu);
    wd().stop = true;
  }
  wd().cv.notify_all();
  if (wd().thread.joinable()) wd().thread.join();
}

}  // namespace meshtrain::comm::mpi
