// State shared by the members of one threads-backend group: per-rank slots
// that publish buffers for the current op, the barrier that orders them,
// the abort flag and the point-to-point mailboxes.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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

class GroupShared {
 public:
  GroupShared(std::string name, std::vector<int> world_ranks, GroupOptions options);
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

  // First reason wins; wakes every waiter and fails pending recvs.
  void abort(const std::string& reason, AbortKind kind = AbortKind::Aborted);
  bool aborted() const;
  [[noreturn]] void throw_aborted(int rank, const Fingerprint& fp, uint32_t gen);
  std::string rank_name(int r) const;  // "2 (world rank 5)"
  std::string missing(uint32_t gen) const;

 private:
  bool wait_word(int rank, uint32_t gen, bool drain, Clock::time_point deadline, const Fingerprint& fp);
  void wake();

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
};

}  // namespace meshtrain::comm::threads
