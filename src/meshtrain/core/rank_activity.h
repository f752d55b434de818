// What a rank's training thread is doing, read from other threads: the
// heartbeat publishes it (train/heartbeat.h) and the step splits its time
// by it (docs/comm.md, "Stragglers and hangs").
//   - progress: a count bumped at every named place the thread passes (a
//     program action, a step phase, a checkpoint piece) and on the way into
//     and out of every collective;
//   - the step and the phase it is in (static names: "forward", ...);
//   - whether it is inside a collective call (blocked on peers or moving
//     data: a rank waiting for a hung peer is not hung itself), and the
//     seconds it spent inside them in all.
// A thread binds its rank's record for as long as it runs that rank
// (threads of one process may run different ranks); unbound threads (the
// backends' progress threads, OpenMP workers, tools) record nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace meshtrain::activity {

struct RankActivity {
  std::atomic<uint64_t> progress{0};
  std::atomic<int64_t> step{0};                 // the step being run (1-based), 0 before the first
  std::atomic<const char*> phase{"starting"};   // a static name
  std::atomic<int> collective_depth{0};         // > 0: inside a collective call
  std::atomic<int64_t> collective_ns{0};        // time inside collective calls, in all
};

// Binds `record` to this thread for the guard's lifetime (the previous
// binding comes back after).
class Bind {
 public:
  explicit Bind(RankActivity* record);
  ~Bind();
  Bind(const Bind&) = delete;
  Bind& operator=(const Bind&) = delete;

 private:
  RankActivity* previous_;
};

RankActivity* bound();  // null when this thread runs no rank

// Progress at a named place (`phase` must outlive the record: a literal).
void mark(const char* phase);
void set_step(int64_t step);
// Seconds this thread's rank has spent inside collective calls (0 unbound).
double collective_seconds();

// Scope of one collective call (blocking op or wait on a non-blocking one);
// nested scopes count once.
class InCollective {
 public:
  InCollective();
  ~InCollective();
  InCollective(const InCollective&) = delete;
  InCollective& operator=(const InCollective&) = delete;

 private:
  RankActivity* record_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace meshtrain::activity
