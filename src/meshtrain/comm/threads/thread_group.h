// One rank's view of a threads-backend group.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

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
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name = "") override;
  void abort(const std::string& reason) override;

 protected:
  Work start(OpDesc& d, bool async) override;

 private:
  struct Task {
    OpDesc d;
    std::shared_ptr<WorkImpl> work;
  };
  template <typename F> void run_inline(F&& f);
  void execute(OpDesc& d);
  void enter(OpDesc& d, const Fingerprint& fp, const void* send);
  void verify(const OpDesc& d, const Fingerprint& fp);
  void body(const OpDesc& d, const void* send);
  Work send_p2p(const OpDesc& d);
  Work recv_p2p(const OpDesc& d);
  void progress_loop();

  std::shared_ptr<GroupShared> shared_;
  int rank_;
  std::shared_ptr<Registry> registry_;
  uint64_t seq_ = 0;   // collectives issued (caller thread)
  uint32_t gen_ = 0;   // barriers passed (executing thread, serialized by busy_)
  std::vector<char> staging_;  // in-place all_to_all copy, grow-only

  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread worker_;  // started by the first non-blocking collective
};

}  // namespace meshtrain::comm::threads
