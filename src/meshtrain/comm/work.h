// Handle of a non-blocking operation. The operation progresses without the caller (threads:
// the group's progress thread; MPI: the library's progress plus polling while anyone
// waits), so computation can overlap it (docs/math.md, "Rule: overlap is measured").
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace meshtrain::comm {

enum class WorkState { Pending, Done, Failed };

// Backend side of a Work. The default implementation is a completion flag
// set by whoever runs the operation; MPI overrides poll() to test requests.
class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  void complete();                       // marks Done, wakes waiters
  void fail(std::exception_ptr error);   // marks Failed, wakes waiters
  // When the operation began executing (default: when it was issued; the
  // threads backend marks when its progress thread picks it up) and ended.
  void mark_started();
  double busy_seconds();  // ended - began; 0 while pending
  // Issued to ended: how long the operation was in flight, queued behind
  // earlier operations of its group included; 0 while pending.
  double in_flight_seconds();
  // How long a wait that began at `from` lasted until the operation ended
  // (0 if it had ended before): at most in_flight_seconds(), since nobody
  // waits for an operation before issuing it.
  double seconds_until_done(std::chrono::steady_clock::time_point from);
  WorkState state();
  std::exception_ptr error();
  // Blocks until finished or `deadline`; returns false on the deadline.
  virtual bool wait_until(std::chrono::steady_clock::time_point deadline);
  // Called when wait() gives up at the op's deadline: builds the error.
  std::function<std::exception_ptr()> on_timeout;
  // Called once by the waiting thread when the op finished, e.g. to record
  // the time spent waiting in the group's CommStats.
  std::function<void(double wait_seconds)> on_waited;
  // Called when the last handle is dropped while the op is pending during
  // stack unwinding (the rank is failing): the backend aborts the group so
  // the op ends promptly. Set by the threads backend for collectives.
  std::function<void()> on_abandon;
  std::chrono::steady_clock::time_point deadline{};

 protected:
  virtual void poll() {}  // MPI: MPI_Test the request(s)
  std::mutex mu_;
  std::condition_variable cv_;
  WorkState state_ = WorkState::Pending;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point issued_ = std::chrono::steady_clock::now(), started_ = issued_, finished_{};
};

class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkImpl> impl);
  static Work completed();  // an already finished Work (e.g. a size-1 group)

  // Waits up to the op's own timeout; throws the op's error (CommAborted,
  // CommTimeout, CommMismatch...) if it failed or ran out of time.
  void wait();
  // Waits at most `timeout`: true when finished (rethrows a failure), false
  // if still pending. Does not cancel anything.
  bool wait(std::chrono::milliseconds timeout);
  bool is_completed() const;  // finished, successfully or not
  // Time the operation itself took (start of execution to completion): the
  // communication time of docs/math.md (M.20), whether or not anyone waited for it.
  double busy_seconds() const;
  double in_flight_seconds() const;  // WorkImpl::in_flight_seconds
  double seconds_until_done(std::chrono::steady_clock::time_point from) const;  // WorkImpl::seconds_until_done
  WorkState state() const;
  std::exception_ptr error() const;  // null unless Failed
  bool valid() const { return handle_ != nullptr; }
  WorkImpl* impl() const { return handle_ ? handle_->impl.get() : nullptr; }

 private:
  // Copies of a Work share one Handle. When the last one is dropped while a
  // collective is pending because the rank is unwinding an exception, the
  // backend aborts the group and the handle waits for the op to end: peers
  // may be reading this rank's buffers, which must not be freed under them.
  // (Dropping a pending Work in normal flow does not block.)
  struct Handle {
    std::shared_ptr<WorkImpl> impl;
    ~Handle();
  };
  std::shared_ptr<Handle> handle_;
};

}  // namespace meshtrain::comm
