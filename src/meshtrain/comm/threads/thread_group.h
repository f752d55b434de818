// One rank's view of a threads-backend group.
#pragma once

#include <memory>
#include <mutex>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/comm/threads/group_state.h"

namespace meshtrain::comm::threads {

// Groups made from one world, so a world abort reaches all of them.
struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<GroupShared>> groups;
  std::string abort_reason;  // non-empty once the world aborted
  void add(const std::shared_ptr<GroupShared>& g);
  void abort_all(const std::string& reason);
};

class ThreadGroup final : public ProcessGroup {
 public:
  ThreadGroup(std::shared_ptr<GroupShared> shared, int rank, std::shared_ptr<Registry> registry);
  ~ThreadGroup() override;
  int rank() const override { return rank_; }
  int size() const override { return shared_->size(); }
  std::string_view backend() const override { return "threads"; }
  using ProcessGroup::split;
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name,
                                      const GroupOptions& options) override;
  void abort(const std::string& reason) override;

 protected:
  Work start(OpDesc& d, bool async) override;

 private:
  template <typename F> void run_inline(F&& f);
  void execute(OpDesc& d);
  void enter(OpDesc& d, const Fingerprint& fp, const void* send);
  void verify(const OpDesc& d, const Fingerprint& fp);
  Work send_p2p(const OpDesc& d);
  Work recv_p2p(const OpDesc& d);

  std::shared_ptr<GroupShared> shared_;
  int rank_;
  std::shared_ptr<Registry> registry_;
  uint64_t seq_ = 0;   // collectives issued (caller thread)
  uint32_t gen_ = 0;   // barriers passed by blocking ops (caller thread)
  std::vector<char> staging_;  // in-place all_to_all copy, grow-only
};

}  // namespace meshtrain::comm::threads
