// Internals of the MPI backend shared by its source files.
#pragma once

#include <malloc.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/comm/reduce_kernels.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm::mpi {


using Clock = std::chrono::steady_clock;

// ---- runtime: init, serialization fallback, watchdog -------------------------
struct Runtime {
  std::mutex init_mu;
  bool initialized = false, finalized = false, multiple = false;
  std::recursive_mutex call_mu;  // used only without MPI_THREAD_MULTIPLE
  std::shared_ptr<ProcessGroup> world;
  // watchdog
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  // What the watchdog needs to name a stuck op; the text is only built
  // when it fires (formatting per call would cost a microsecond).
  struct Watch {
    Clock::time_point deadline;
    std::string what;  // preformatted, or empty: format from the fields
    const std::string* group = nullptr;
    OpKind kind = OpKind::Barrier;
    uint64_t seq = 0, count = 0;
    int rank = -1;
    std::string str() const {
      if (!what.empty()) return what;
      return detail::concat("group '", *group, "' ", op_kind_name(kind), "(seq=", seq, ", count=", count,
                            ") at rank ", rank, " timed out (MPI cannot tell which peer is missing)");
    }
  };
  std::map<uint64_t, Watch> inflight;
  uint64_t next_id = 0;
  bool wd_stop = false;
  std::thread watchdog;
};
inline Runtime& rt() {
  static Runtime r;
  return r;
}

struct CallLock {
  std::unique_lock<std::recursive_mutex> lock;
  CallLock() {
    if (!rt().multiple) lock = std::unique_lock<std::recursive_mutex>(rt().call_mu);
  }
};

inline void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  MT_THROW(CommError, what, " failed: ", std::string(msg, size_t(len)));
}

// A grace after the deadline lets Work::wait report CommTimeout first.
constexpr auto kWatchdogGrace = std::chrono::seconds(5);

struct WatchGuard {
  uint64_t id;
  explicit WatchGuard(Runtime::Watch w) {
    std::lock_guard<std::mutex> lock(rt().wd_mu);
    id = rt().next_id++;
    rt().inflight.emplace(id, std::move(w));
  }
  WatchGuard(Clock::time_point deadline, std::string what) : WatchGuard(Runtime::Watch{deadline, std::move(what)}) {}
  ~WatchGuard() {
    std::lock_guard<std::mutex> lock(rt().wd_mu);
    rt().inflight.erase(id);
  }
};

inline void watchdog_loop() {
  std::unique_lock<std::mutex> lock(rt().wd_mu);
  while (!rt().wd_stop) {
    rt().wd_cv.wait_for(lock, std::chrono::milliseconds(200));
    const auto now = Clock::now();
    for (auto& [id, e] : rt().inflight)
      if (now > e.deadline + kWatchdogGrace) {
        int rank = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        std::fprintf(stderr, "meshtrain comm (world rank %d): %s; MPI cannot wake peers, aborting all ranks\n", rank,
                     e.str().c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 124);
      }
  }
}

inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16: return MPI_UINT16_T;  // moved as bits; reduced in f32
    case DType::F16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}
inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}
inline int icount(size_t n) {
  MT_REQUIRE(CommError, n <= size_t(INT32_MAX), "MPI counts are int: ", n, " elements is too many for one call");
  return int(n);
}

// ---- staging: reused buffers, never fresh pages per call ----------------------
class StagingPool {
 public:
  struct Buf {
    char* p;
    size_t cap;
  };
  Buf acquire(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->cap >= bytes && (best == free_.end() || it->cap < best->cap)) best = it;
    if (best != free_.end()) {
      Buf b = *best;
      free_.erase(best);
      return b;
    }
    return Buf{static_cast<char*>(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64))), bytes};
  }
  void release(Buf b) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(b);
  }
  ~StagingPool() {
    for (auto& b : free_) std::free(b.p);
  }

 private:
  std::mutex mu_;
  std::vector<Buf> free_;
};

// ---- Work over MPI requests ----------------------------------------------------
class MpiWork final : public WorkImpl {
 public:
  std::vector<MPI_Request> reqs;
  std::function<void()> finish;  // unpack staging, Avg divide, release buffers
  std::string what;

  bool wait_until(Clock::time_point deadline) override {
    WatchGuard guard(deadline, what + " timed out");
    const auto t0 = Clock::now();
    for (int i = 0;; ++i) {
      poll();
      if (state() != WorkState::Pending) return true;
      const auto now = Clock::now();
      if (now >= deadline) return false;
      // Spin briefly, then yield the core (ranks may outnumber cores).
      if (now - t0 > std::chrono::milliseconds(2)) std::this_thread::sleep_for(std::chrono::microseconds(50));
      else if (now - t0 > std::chrono::microseconds(20)) sched_yield();
    }
  }

 protected:
  void poll() override {
    std::unique_lock<std::mutex> lock(poll_mu_, std::try_to_lock);
    if (!lock.owns_lock() || done_) return;
    int flag = 0;
    {
      CallLock call;
      MPI_Testall(int(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE);
    }
    if (!flag) return;
    done_ = true;
    try {
      if (finish) finish();
      complete();
    } catch (...) {
      fail(std::current_exception());
    }
  }

 private:
  std::mutex poll_mu_;
  bool done_ = false;
};

// ---- the group ------------------------------------------------------------------
class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(MPI_Comm comm, std::string name, GroupOptions options) : ProcessGroup(std::move(name), options), comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiGroup() override {
    if (comm_ != MPI_COMM_WORLD && !rt().finalized) {
      CallLock call;
      MPI_Comm_free(&comm_);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }

  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    MPI_Comm out = MPI_COMM_NULL;
    {
      WatchGuard guard(Clock::now() + options().timeout, detail::concat("group '", this->name(), "' split"));
      CallLock call;
      check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split");
    }
    if (out == MPI_COMM_NULL) return nullptr;
    return std::make_shared<MpiGroup>(out, name.empty() ? detail::concat(this->name(), ".", color) : name,
                                      options());
  }

  void abort(const std::string& reason) override {
    mpi_abort(detail::concat("group '", name(), "' aborted by rank ", rank_, ": ", reason));
  }

 protected:
  Work start(OpDesc& d, bool async) override;

 private:
  void check_fingerprint(const OpDesc& d);
  std::string describe(const OpDesc& d) const {
    return detail::concat("group '", name(), "' ", op_kind_name(d.kind), "(seq=", d.seq, ", count=", d.count,
                          ", dtype=", dtype_name(d.dtype), ") at rank ", rank_, " (MPI cannot tell which peer is missing)");
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  uint64_t seq_ = 0;
  std::shared_ptr<StagingPool> staging_ = std::make_shared<StagingPool>();
};

}  // namespace meshtrain::comm::mpi
