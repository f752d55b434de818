// State shared by the members of one threads-backend group: per-rank slots
// that publish buffers for the current op, the barrier that orders them,
// the abort flag, the point-to-point mailboxes and the queue of
// non-blocking collectives with the group's one executor thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/comm/types.h"
#include "meshtrain/comm/work.h"

namespace meshtrain::comm::threads {

using Clock = std::chrono::steady_clock;
enum class AbortKind { None, Aborted, Timeout, Mismatch };

class GroupShared;

// Written by its rank before the entry barrier, read by peers between the
// entry and exit barriers of the same op.
struct alignas(64) Slot {
  Fingerprint fp;
  const void* send = nullptr;
  void* recv = nullptr;
  const size_t* send_counts = nullptr;
  const size_t* recv_counts = nullptr;
  int color = 0, key = 0;
  std::shared_ptr<GroupShared> split_result;
};

struct Message {
  int src, tag;
  std::vector<char> data;
};
struct PendingRecv {
  int src, tag;
  void* buf;
  size_t bytes;
  std::shared_ptr<WorkImpl> work;
};
struct Mailbox {
  std::mutex mu;
  std::deque<Message> msgs;      // arrived before the matching recv
  std::deque<PendingRecv> recvs; // posted before the matching send
  std::vector<std::vector<char>> pool;  // reused message buffers
};

// A non-blocking collective issued by one member, waiting for the others.
struct AsyncOp {
  OpDesc d;
  std::shared_ptr<WorkImpl> work;
};

class GroupShared {
 public:
  GroupShared(std::string name, std::vector<int> world_ranks, GroupOptions options);
  ~GroupShared();  // joins the executor (every member's queue is empty by then)
  int size() const { return int(world_ranks_.size()); }
  const std::string& name() const { return name_; }
  const GroupOptions& options() const { return options_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  Slot& slot(int r) { return slots_[size_t(r)]; }
  Mailbox& mailbox(int r) { return mailboxes_[size_t(r)]; }

  // Barrier number `gen` (every member counts its barriers identically).
  // Returns when all members arrived; throws CommAborted/CommTimeout/
  // CommMismatch if the group is or gets aborted first. `drain` (the exit
  // barrier of an op whose body ran) waits for every member to finish
  // reading even when aborted, so nobody frees a buffer a peer still reads.
  void barrier(int rank, uint32_t gen, bool drain, Clock::time_point deadline, const Fingerprint& fp,
               double* waited);

  // Work sharing inside one op: pieces are claimed in any order by
  // whichever members run (ranks may outnumber cores, and a rank may be
  // descheduled); the result does not depend on who reduces a piece.
  // Reset by the last arrival of every barrier.
  size_t claim_piece() { return pieces_.fetch_add(1, std::memory_order_relaxed); }

  // Non-blocking collectives (async_ops.cc). Each member queues its ops in
  // issue order; one executor thread per group runs op k once every member
  // has issued it and does every member's share of the work. A world thus
  // has one progress thread per group that uses non-blocking ops (not one
  // per rank and group), and groups still progress independently of each
  // other. Ops not issued by every member by their deadline time out.
  void enqueue(int rank, AsyncOp op);
  // Blocks until `rank` has no queued or running non-blocking op: a
  // blocking op runs after the member's earlier non-blocking ones.
  void wait_async_idle(int rank);

  // First reason wins; wakes every waiter and fails pending recvs.
  void abort(const std::string& reason, AbortKind kind = AbortKind::Aborted);
  bool aborted() const;
  [[noreturn]] void throw_aborted(int rank, const Fingerprint& fp, uint32_t gen);
  // The error of an op that failed because the group aborted; `not_arrived`
  // names the members that had not reached it.
  std::exception_ptr aborted_error(int rank, const Fingerprint& fp, const std::string& not_arrived) const;
  std::string rank_name(int r) const;  // "2 (world rank 5)"
  std::string missing(uint32_t gen) const;

 private:
  bool wait_word(int rank, uint32_t gen, bool drain, Clock::time_point deadline, const Fingerprint& fp);
  void wake();
  void executor_loop();
  void run_async(std::vector<AsyncOp>& heads);
  struct FailedOp {
    int rank;
    std::string not_arrived;
    AsyncOp op;
  };
  std::vector<FailedOp> take_queued_locked();
  std::string missing_async_locked(uint64_t seq) const;

  std::string name_;
  std::vector<int> world_ranks_;
  GroupOptions options_;
  std::vector<Slot> slots_;
  std::deque<Mailbox> mailboxes_;
  // bits 0-30: arrivals, bit 31: aborted, bits 32-63: barrier generation.
  // The last arriver advances the generation with a CAS, so "passed" and
  // "aborted" are decided atomically: no member can pass a barrier that a
  // departed member (timeout, abort) has left.
  alignas(64) std::atomic<uint64_t> word_{0};
  alignas(64) std::atomic<size_t> pieces_{0};
  alignas(64) std::atomic<uint32_t> wake_{0};
  std::atomic<int> sleepers_{0};
  std::unique_ptr<std::atomic<uint32_t>[]> arrived_;  // diagnostics: last gen each rank reached + 1
  mutable std::mutex abort_mu_;
  std::string abort_reason_;
  AbortKind abort_kind_ = AbortKind::None;
  int spin_us_;
  int yield_rounds_;

  // Non-blocking collectives: per-member FIFO, the executor and its staging.
  std::mutex async_mu_;
  std::condition_variable async_cv_;
  std::vector<std::deque<AsyncOp>> async_queues_;
  int async_running_ = 0;  // heads popped and being run
  bool executor_stop_ = false;
  std::thread executor_;
  std::vector<std::vector<char>> async_staging_;  // in-place all_to_all copies, per member
};

// The data movement of one collective for member `me`, reading peers'
// buffers from their slots (thread_group.cc). Every member's call together
// covers the whole op; `send` is me's (possibly staged) input.
void run_collective_body(GroupShared& shared, int me, const OpDesc& d, const void* send);

}  // namespace meshtrain::comm::threads
