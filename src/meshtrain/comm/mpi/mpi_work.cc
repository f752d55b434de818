#include "meshtrain/comm/mpi/mpi_work.h"

#include <sched.h>

#include <condition_variable>
#include <cstdlib>
#include <string>
#include <thread>

#include "meshtrain/comm/mpi/mpi_runtime.h"

namespace meshtrain::comm::mpi {

bool MpiWork::test() {
  std::unique_lock<std::mutex> lock(poll_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  if (done_) return true;
  int flag = 0;
  {
    CallLock call;
    MPI_Testall(int(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE);
  }
  if (!flag) return false;
  done_ = true;
  try {
    if (finish) finish();
    complete();
  } catch (...) {
    fail(std::current_exception());
  }
  return true;
}

bool MpiWork::wait_until(Clock::time_point deadline) {
  WatchGuard guard(deadline, what + " timed out");
  const auto t0 = Clock::now();
  for (;;) {
    poll();
    if (state() != WorkState::Pending) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    // Spin briefly, then yield the core (ranks may outnumber cores).
    if (now - t0 > std::chrono::milliseconds(2)) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else if (now - t0 > std::chrono::microseconds(20)) sched_yield();
  }
}

namespace {

struct Progress {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<MpiWork>> pending;  // kept until complete, even if the caller dropped it
  bool stop = false;
  std::thread thread;
};

Progress& pg() {
  static Progress p;
  return p;
}

// Tests every pending op, then sleeps ~100 us: one MPI_Testall per op and
// period is enough for the library to move a ring step along, and costs a
// few percent of one core while anything is in flight (nothing when idle).
void progress_loop() {
  Progress& p = pg();
  std::vector<std::shared_ptr<MpiWork>> now, finished;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(p.mu);
      for (auto& f : finished) std::erase(p.pending, f);
      finished.clear();
      p.cv.wait(lock, [&] { return p.stop || !p.pending.empty(); });
      if (p.stop) return;
      now = p.pending;
    }
    for (auto& w : now)
      if (w->test()) finished.push_back(w);
    now.clear();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace

void progress_add(const std::shared_ptr<MpiWork>& work) {
  if (!pg().thread.joinable()) return;  // disabled: ops progress when waited on
  {
    std::lock_guard<std::mutex> lock(pg().mu);
    pg().pending.push_back(work);
  }
  pg().cv.notify_one();
}

void start_progress() {
  // MESHTRAIN_MPI_PROGRESS=off measures what overlap is worth without it.
  if (const char* v = std::getenv("MESHTRAIN_MPI_PROGRESS"); v && std::string(v) == "off") return;
  std::lock_guard<std::mutex> lock(pg().mu);
  pg().stop = false;
  if (!pg().thread.joinable()) pg().thread = std::thread(progress_loop);
}

void stop_progress() {
  {
    std::lock_guard<std::mutex> lock(pg().mu);
    pg().stop = true;
  }
  pg().cv.notify_all();
  if (pg().thread.joinable()) pg().thread.join();
}

}  // namespace meshtrain::comm::mpi
