#include "meshtrain/comm/work.h"

#include <algorithm>
#include <exception>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rank_activity.h"

namespace meshtrain::comm {

using Clock = std::chrono::steady_clock;

void WorkImpl::complete() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == WorkState::Pending) {
    state_ = WorkState::Done;
    finished_ = Clock::now();
  }
  cv_.notify_all();
}

void WorkImpl::fail(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == WorkState::Pending) {
    state_ = WorkState::Failed;
    error_ = std::move(error);
    finished_ = Clock::now();
  }
  cv_.notify_all();
}

void WorkImpl::mark_started() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = Clock::now();
}

double WorkImpl::busy_seconds() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == WorkState::Pending) return 0;
  return std::chrono::duration<double>(finished_ - started_).count();
}

double WorkImpl::in_flight_seconds() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == WorkState::Pending) return 0;
  return std::chrono::duration<double>(finished_ - issued_).count();
}

double WorkImpl::seconds_until_done(Clock::time_point from) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == WorkState::Pending || finished_ <= from) return 0;
  return std::chrono::duration<double>(finished_ - std::max(from, issued_)).count();
}

WorkState WorkImpl::state() {
  poll();
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

std::exception_ptr WorkImpl::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool WorkImpl::wait_until(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return state_ != WorkState::Pending; });
}

Work::Work(std::shared_ptr<WorkImpl> impl) {
  if (impl) handle_ = std::make_shared<Handle>(Handle{std::move(impl)});
}

Work::Handle::~Handle() {
  // Only a rank unwinding an exception with a collective in flight: abort the
  // group so the op ends promptly, and wait for it before the buffers go.
  if (!impl || std::uncaught_exceptions() == 0 || !impl->on_abandon) return;
  if (impl->state() != WorkState::Pending) return;
  impl->on_abandon();
  impl->wait_until(Clock::time_point::max());
}

Work Work::completed() {
  auto impl = std::make_shared<WorkImpl>();
  impl->complete();
  return Work(std::move(impl));
}

static bool wait_impl(WorkImpl& w, Clock::time_point deadline) {
  const activity::InCollective in_collective;  // the rank waits on its peers here, not hangs
  const auto t0 = Clock::now();
  const bool done = w.wait_until(deadline);
  if (done && w.on_waited) {
    w.on_waited(std::chrono::duration<double>(Clock::now() - t0).count());
    w.on_waited = nullptr;
  }
  if (done && w.state() == WorkState::Failed) std::rethrow_exception(w.error());
  return done;
}

void Work::wait() {
  MT_REQUIRE(CommError, valid(), "wait() on an empty Work");
  WorkImpl& w = *impl();
  const auto deadline = w.deadline == Clock::time_point{} ? Clock::time_point::max() : w.deadline;
  if (!wait_impl(w, deadline)) {
    // The backend decides what a missed deadline means (and may find the
    // op finished meanwhile: then on_timeout returns null).
    auto err = w.on_timeout ? w.on_timeout() : nullptr;
    if (!w.on_timeout) err = std::make_exception_ptr(CommTimeout("operation did not finish within its timeout"));
    if (err) std::rethrow_exception(err);
    wait_impl(w, Clock::time_point::max());
  }
}

bool Work::wait(std::chrono::milliseconds timeout) {
  MT_REQUIRE(CommError, valid(), "wait() on an empty Work");
  return wait_impl(*impl(), Clock::now() + timeout);
}

bool Work::is_completed() const { return valid() && impl()->state() != WorkState::Pending; }
double Work::busy_seconds() const { return valid() ? impl()->busy_seconds() : 0.0; }
double Work::in_flight_seconds() const { return valid() ? impl()->in_flight_seconds() : 0.0; }
double Work::seconds_until_done(Clock::time_point from) const {
  return valid() ? impl()->seconds_until_done(from) : 0.0;
}
WorkState Work::state() const { return valid() ? impl()->state() : WorkState::Done; }
std::exception_ptr Work::error() const { return valid() ? impl()->error() : nullptr; }

}  // namespace meshtrain::comm
