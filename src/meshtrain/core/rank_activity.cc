#include "meshtrain/core/rank_activity.h"

namespace meshtrain::activity {
namespace {

thread_local RankActivity* t_record = nullptr;

}  // namespace

Bind::Bind(RankActivity* record) : previous_(t_record) { t_record = record; }
Bind::~Bind() { t_record = previous_; }

RankActivity* bound() { return t_record; }

void mark(const char* phase) {
  if (!t_record) return;
  t_record->phase.store(phase, std::memory_order_relaxed);
  t_record->progress.fetch_add(1, std::memory_order_relaxed);
}

void set_step(int64_t step) {
  if (!t_record) return;
  t_record->step.store(step, std::memory_order_relaxed);
  t_record->progress.fetch_add(1, std::memory_order_relaxed);
}

double collective_seconds() {
  return t_record ? double(t_record->collective_ns.load(std::memory_order_relaxed)) * 1e-9 : 0.0;
}

InCollective::InCollective() : record_(t_record) {
  if (!record_) return;
  record_->progress.fetch_add(1, std::memory_order_relaxed);
  if (record_->collective_depth.fetch_add(1, std::memory_order_relaxed) == 0)
    start_ = std::chrono::steady_clock::now();
}

InCollective::~InCollective() {
  if (!record_) return;
  if (start_ != std::chrono::steady_clock::time_point{}) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
    record_->collective_ns.fetch_add(ns.count(), std::memory_order_relaxed);
  }
  record_->progress.fetch_add(1, std::memory_order_relaxed);
  record_->collective_depth.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace meshtrain::activity
