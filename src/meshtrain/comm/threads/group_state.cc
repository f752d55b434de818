#include "meshtrain/comm/threads/group_state.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sched.h>

#include <climits>
#include <ctime>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/core/threading.h"

namespace meshtrain::comm::threads {
namespace {

constexpr uint64_t kCountMask = (uint64_t(1) << 31) - 1;
constexpr uint64_t kAbortBit = uint64_t(1) << 31;
inline uint32_t gen_of(uint64_t w) { return uint32_t(w >> 32); }
inline uint64_t count_of(uint64_t w) { return w & kCountMask; }
inline uint64_t make_word(uint32_t gen) { return uint64_t(gen) << 32; }

// Sleeping waits yield the core: 4-8 ranks share 2 cores in tests.
void futex_wait(std::atomic<uint32_t>* a, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{time_t(timeout.count() / 1'000'000'000), long(timeout.count() % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* a) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

GroupShared::GroupShared(std::string name, std::vector<int> world_ranks, GroupOptions options)
    : name_(std::move(name)), world_ranks_(std::move(world_ranks)), options_(options) {
  const int n = size();
  slots_.resize(size_t(n));
  mailboxes_.resize(size_t(n));
  arrived_ = std::make_unique<std::atomic<uint32_t>[]>(size_t(n));
  for (int r = 0; r < n; ++r) arrived_[size_t(r)].store(0);
  // Spinning only pays when every member has a core of its own.
  spin_us_ = n <= hardware_cores() ? 20 : 0;
  yield_rounds_ = n <= hardware_cores() ? 0 : 4 * n;
  async_queues_.resize(size_t(n));
  async_staging_.resize(size_t(n));
}

GroupShared::~GroupShared() {
  {
    std::lock_guard<std::mutex> lock(async_mu_);
    executor_stop_ = true;
  }
  async_cv_.notify_all();
  if (executor_.joinable()) executor_.join();
}

bool GroupShared::aborted() const { return word_.load(std::memory_order_acquire) & kAbortBit; }

void GroupShared::wake() {
  wake_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&wake_);
}

std::string GroupShared::rank_name(int r) const {
  return detail::concat(r, " (world rank ", world_ranks_[size_t(r)], ")");
}

std::string GroupShared::missing(uint32_t gen) const {
  std::string out;
  for (int r = 0; r < size(); ++r) {
    if (int32_t(arrived_[size_t(r)].load(std::memory_order_acquire) - (gen + 1)) < 0) {
      if (!out.empty()) out += ", ";
      out += rank_name(r);
    }
  }
  return out.empty() ? "none" : out;
}

void GroupShared::abort(const std::string& reason, AbortKind kind) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (abort_kind_ == AbortKind::None) {
      abort_reason_ = reason;
      abort_kind_ = kind;
    }
    word_.fetch_or(kAbortBit, std::memory_order_acq_rel);
  }
  wake();
  {
    std::lock_guard<std::mutex> lock(async_mu_);  // the executor fails queued ops
  }
  async_cv_.notify_all();
  for (int r = 0; r < size(); ++r) {
    Mailbox& mb = mailbox(r);
    std::deque<PendingRecv> failed;
    {
      std::lock_guard<std::mutex> lock(mb.mu);
      failed.swap(mb.recvs);
    }
    for (auto& p : failed)
      p.work->fail(std::make_exception_ptr(
          CommAborted(detail::concat("group '", name_, "' recv from rank ", p.src, " tag ", p.tag,
                                     " at rank ", rank_name(r), ": ", reason))));
  }
}

std::exception_ptr GroupShared::aborted_error(int rank, const Fingerprint& fp, const std::string& not_arrived) const {
  std::string reason;
  AbortKind kind;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    reason = abort_reason_;
    kind = abort_kind_;
  }
  const std::string msg = detail::concat("group '", name_, "' ", fp.str(), " failed at rank ", rank_name(rank),
                                         ": group aborted: ", reason, " [not arrived: ", not_arrived, "]");
  switch (kind) {
    case AbortKind::Timeout: return std::make_exception_ptr(CommTimeout(msg));
    case AbortKind::Mismatch: return std::make_exception_ptr(CommMismatch(msg));
    default: return std::make_exception_ptr(CommAborted(msg));
  }
}

void GroupShared::throw_aborted(int rank, const Fingerprint& fp, uint32_t gen) {
  std::rethrow_exception(aborted_error(rank, fp, missing(gen)));
}

void GroupShared::barrier(int rank, uint32_t gen, bool drain, Clock::time_point deadline, const Fingerprint& fp,
                          double* waited) {
  const uint64_t R = uint64_t(size());
  uint64_t v = word_.fetch_add(1, std::memory_order_acq_rel) + 1;
  arrived_[size_t(rank)].store(gen + 1, std::memory_order_release);
  if (!(v & kAbortBit) && gen_of(v) != gen)
    MT_THROW(InternalError, "group '", name_, "' barrier generation ", gen_of(v), " != expected ", gen, " at rank ",
             rank, " in ", fp.str());
  if (count_of(v) == R) {
    pieces_.store(0, std::memory_order_relaxed);  // published by the CAS below
    if (!(v & kAbortBit) && word_.compare_exchange_strong(v, make_word(gen + 1), std::memory_order_acq_rel)) {
      wake();
      return;
    }
    wake();  // aborted: drainers wait for the count to reach R
  }
  const auto t0 = Clock::now();
  const bool passed = wait_word(rank, gen, drain, deadline, fp);
  if (waited) *waited += std::chrono::duration<double>(Clock::now() - t0).count();
  if (!passed) throw_aborted(rank, fp, gen);
}

// True when barrier `gen` passed, false when it failed by abort; throws
// CommTimeout (after aborting the group) at the deadline.
bool GroupShared::wait_word(int rank, uint32_t gen, bool drain, Clock::time_point deadline, const Fingerprint& fp) {
  const uint64_t R = uint64_t(size());
  auto state = [&](uint64_t w) -> int {  // 1 passed, 0 failed, -1 keep waiting
    if (gen_of(w) != gen) return 1;
    if (w & kAbortBit) return (!drain || count_of(w) >= R) ? 0 : -1;
    return -1;
  };
  const auto spin_end = Clock::now() + std::chrono::microseconds(spin_us_);
  for (int i = 0;; ++i) {
    int s = state(word_.load(std::memory_order_acquire));
    if (s >= 0) return s == 1;
    if ((i & 63) == 63 && Clock::now() >= spin_end) break;
    cpu_relax();
  }
  // Oversubscribed: hand the core to a peer that still has to arrive, a
  // few times, before paying for a futex sleep and wake-up.
  for (int i = 0; i < yield_rounds_; ++i) {
    int s = state(word_.load(std::memory_order_acquire));
    if (s >= 0) return s == 1;
    sched_yield();
  }
  for (;;) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t w32 = wake_.load(std::memory_order_seq_cst);
    int s = state(word_.load(std::memory_order_seq_cst));
    if (s < 0) {
      const auto now = Clock::now();
      if (now >= deadline) {
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        // Leave only if the barrier has not passed meanwhile; the CAS makes
        // that decision atomic with the last arrival.
        std::unique_lock<std::mutex> lock(abort_mu_);
        uint64_t w = word_.load(std::memory_order_acquire);
        bool mine = false;
        while (gen_of(w) == gen && !(w & kAbortBit)) {
          if (word_.compare_exchange_weak(w, w | kAbortBit, std::memory_order_acq_rel)) {
            mine = true;
            break;
          }
        }
        if (gen_of(w) != gen) return true;
        if (!mine) return false;  // someone else aborted first: report their reason
        const std::string msg =
            detail::concat("group '", name_, "' ", fp.str(), " timed out at rank ", rank_name(rank),
                           " waiting for rank(s) ", missing(gen), " (never entered this op, or stuck before it)");
        if (abort_kind_ == AbortKind::None) {
          abort_reason_ = msg;
          abort_kind_ = AbortKind::Timeout;
        }
        lock.unlock();
        abort(msg, AbortKind::Timeout);  // wakes waiters, fails pending recvs
        throw CommTimeout(msg);
      }
      auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100));
      futex_wait(&wake_, w32, std::chrono::duration_cast<std::chrono::nanoseconds>(slice));
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (s >= 0) return s == 1;
  }
}

}  // namespace meshtrain::comm::threads
