// Non-blocking collectives of the threads backend: each member queues its
// ops; the group's executor thread runs op k once every member has issued
// it, doing every member's share (the ranks share the address space, so one
// thread can read all inputs and write all outputs). One executor per group
// that uses non-blocking ops bounds the world's progress threads by its
// number of groups instead of ranks x groups, and groups stay independent
// (no cross-group ordering is imposed, as with MPI communicators).
#include <algorithm>
#include <cstring>

#include "meshtrain/comm/threads/group_state.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm::threads {
namespace {

Fingerprint fingerprint_of(const OpDesc& d) {
  return {d.kind, d.seq, d.kind == OpKind::AllToAll ? 0 : d.count, d.dtype, d.kind == OpKind::Broadcast ? d.root : -1,
          d.op};
}

}  // namespace

void GroupShared::enqueue(int rank, AsyncOp op) {
  if (aborted()) {
    op.work->fail(aborted_error(rank, fingerprint_of(op.d), "(the group was already aborted)"));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(async_mu_);
    async_queues_[size_t(rank)].push_back(std::move(op));
    if (!executor_.joinable()) executor_ = std::thread([this] { executor_loop(); });
  }
  async_cv_.notify_all();
}

void GroupShared::wait_async_idle(int rank) {
  std::unique_lock<std::mutex> lock(async_mu_);
  async_cv_.wait(lock, [&] { return async_queues_[size_t(rank)].empty() && async_running_ == 0; });
}

std::string GroupShared::missing_async_locked(uint64_t seq) const {
  std::string out;
  for (int r = 0; r < size(); ++r) {
    const auto& q = async_queues_[size_t(r)];
    const bool issued = std::any_of(q.begin(), q.end(), [&](const AsyncOp& o) { return o.d.seq == seq; });
    if (!issued) out += (out.empty() ? "" : ", ") + rank_name(r);
  }
  return out.empty() ? "none" : out;
}

// Called with async_mu_ held after an abort: takes every queued op, with
// the error it fails with (built by the caller without the lock).
std::vector<GroupShared::FailedOp> GroupShared::take_queued_locked() {
  std::vector<FailedOp> out;
  for (int r = 0; r < size(); ++r) {
    auto& q = async_queues_[size_t(r)];
    for (auto& op : q) out.push_back({r, missing_async_locked(op.d.seq), std::move(op)});
  }
  for (auto& q : async_queues_) q.clear();
  return out;
}

void GroupShared::executor_loop() {
  std::unique_lock<std::mutex> lock(async_mu_);
  for (;;) {
    if (aborted()) {
      std::vector<FailedOp> failed = take_queued_locked();
      if (!failed.empty()) {
        lock.unlock();
        for (auto& f : failed) f.op.work->fail(aborted_error(f.rank, fingerprint_of(f.op.d), f.not_arrived));
        lock.lock();
        async_cv_.notify_all();
        continue;
      }
    }
    const bool all_issued = std::all_of(async_queues_.begin(), async_queues_.end(),
                                        [](const std::deque<AsyncOp>& q) { return !q.empty(); });
    if (all_issued && !aborted()) {
      std::vector<AsyncOp> heads;
      for (auto& q : async_queues_) {
        heads.push_back(std::move(q.front()));
        q.pop_front();
      }
      ++async_running_;
      lock.unlock();
      run_async(heads);
      lock.lock();
      --async_running_;
      async_cv_.notify_all();
      continue;
    }
    const bool empty = std::all_of(async_queues_.begin(), async_queues_.end(),
                                   [](const std::deque<AsyncOp>& q) { return q.empty(); });
    if (executor_stop_ && empty) return;
    // The oldest op still waiting for members sets the deadline.
    auto deadline = Clock::time_point::max();
    const AsyncOp* oldest = nullptr;
    int oldest_rank = -1;
    for (int r = 0; r < size(); ++r) {
      const auto& q = async_queues_[size_t(r)];
      if (!q.empty() && q.front().d.deadline < deadline) {
        deadline = q.front().d.deadline;
        oldest = &q.front();
        oldest_rank = r;
      }
    }
    if (oldest && Clock::now() >= deadline) {
      const std::string msg = detail::concat("group '", name_, "' ", fingerprint_of(oldest->d).str(),
                                             " timed out at rank ", rank_name(oldest_rank), " waiting for rank(s) ",
                                             missing_async_locked(oldest->d.seq),
                                             " (never issued this op, or stuck before it)");
      lock.unlock();
      abort(msg, AbortKind::Timeout);
      lock.lock();
      continue;
    }
    async_cv_.wait_until(lock, deadline);
  }
}

void GroupShared::run_async(std::vector<AsyncOp>& heads) {
  const int R = size();
  const Fingerprint fp0 = fingerprint_of(heads[0].d);
  std::string mismatch;
  for (int p = 1; p < R && mismatch.empty(); ++p) {
    const Fingerprint fp = fingerprint_of(heads[size_t(p)].d);
    if (!(fp == fp0))
      mismatch = detail::concat("group '", name_, "' collective mismatch: rank ", rank_name(0), " entered ",
                                fp0.str(), " but rank ", rank_name(p), " entered ", fp.str());
  }
  for (int p = 0; p < R && mismatch.empty() && fp0.kind == OpKind::AllToAll; ++p)
    for (int q = 0; q < R && mismatch.empty(); ++q) {
      const size_t sent = heads[size_t(p)].d.send_counts[size_t(q)];
      const size_t expected = heads[size_t(q)].d.recv_counts[size_t(p)];
      if (sent != expected)
        mismatch = detail::concat("group '", name_, "' all_to_all(seq=", fp0.seq, ") count mismatch: rank ",
                                  rank_name(p), " sends ", sent, " elements to rank ", rank_name(q),
                                  ", which expects ", expected);
    }
  if (!mismatch.empty()) {
    abort(mismatch, AbortKind::Mismatch);
    for (auto& h : heads) h.work->fail(std::make_exception_ptr(CommMismatch(mismatch)));
    return;
  }
  // Publish every member's buffers, then do every member's share.
  std::vector<const void*> sends(static_cast<size_t>(R));
  for (int p = 0; p < R; ++p) {
    const OpDesc& d = heads[size_t(p)].d;
    heads[size_t(p)].work->mark_started();
    const void* send = d.send;
    if (d.kind == OpKind::AllToAll && d.send && d.send == d.recv) {
      auto& buf = async_staging_[size_t(p)];
      if (buf.size() < d.bytes()) buf.resize(d.bytes());
      std::memcpy(buf.data(), d.send, d.bytes());
      send = buf.data();
    }
    sends[size_t(p)] = send;
    Slot& s = slot(p);
    s.fp = fingerprint_of(d);
    s.send = send;
    s.recv = d.recv;
    s.send_counts = d.send_counts.data();
    s.recv_counts = d.recv_counts.data();
  }
  pieces_.store(0, std::memory_order_relaxed);
  try {
    for (int p = 0; p < R; ++p) run_collective_body(*this, p, heads[size_t(p)].d, sends[size_t(p)]);
  } catch (...) {
    for (auto& h : heads) h.work->fail(std::current_exception());
    return;
  }
  for (auto& h : heads) h.work->complete();
}

}  // namespace meshtrain::comm::threads
