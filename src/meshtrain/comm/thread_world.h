// Threads backend (the embedded default): N ranks as threads of one
// process sharing the address space. Collectives read peers' buffers
// directly (no serialization) and reduce in rank order, so results are
// bitwise equal to a serial loop over ranks. A blocking op runs on the
// calling thread; non-blocking ops run on a per-group progress thread so
// computation overlaps them.
//
//   auto world = ThreadWorld::create(4);
//   // in rank r's thread:
//   ProcessGroup& g = *world->group(r);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm {

namespace threads {
class GroupShared;
struct Registry;
}  // namespace threads

class ThreadWorld {
 public:
  static std::shared_ptr<ThreadWorld> create(int size, GroupOptions options = {});
  ~ThreadWorld();
  int size() const { return int(groups_.size()); }
  // Rank r's world group (same object on every call).
  std::shared_ptr<ProcessGroup> group(int rank) const;
  // Aborts every group made from this world (including splits): all ranks
  // blocked in any of them wake with CommAborted carrying `reason`.
  void abort(const std::string& reason);
  bool aborted() const;

 private:
  ThreadWorld() = default;
  std::shared_ptr<threads::Registry> registry_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace meshtrain::comm
