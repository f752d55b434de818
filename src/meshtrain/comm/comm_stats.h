// Per-group, per-op accounting so a run can report exposed communication
// (docs/math.md, "Rule: overlap is measured").
//   bytes:     logical message size M of (M.19) as this rank sees it:
//              all_reduce/broadcast: count; reduce_scatter: input count;
//              all_gather: output count; all_to_all: sum of send counts;
//              send/recv: message size (times the dtype size).
//   call_s:    wall time the caller spent inside the API (issue + wait()).
//   wait_s:    part of call_s spent blocked on peers or on completion; for
//              a non-blocking op overlapped with compute this is the
//              exposed part.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

struct OpStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  double call_s = 0;
  double wait_s = 0;
};

struct CommStats {
  std::array<OpStats, kNumOpKinds> ops{};
  const OpStats& operator[](OpKind k) const { return ops[size_t(k)]; }
  OpStats total() const;
  // One line per op kind with calls > 0, e.g. "all_reduce calls=3 ...".
  std::string str() const;
};

// Thread-safe accumulator owned by each group (caller and progress thread
// both record).
class StatsRecorder {
 public:
  void add(OpKind k, uint64_t bytes, double call_s, double wait_s);
  void add_time(OpKind k, double call_s, double wait_s);  // e.g. Work::wait()
  CommStats snapshot() const;
  void reset();

 private:
  mutable std::mutex mu_;
  CommStats stats_;
};

}  // namespace meshtrain::comm
