#include "meshtrain/core/memory_tracker.h"

#include <cstdio>

namespace meshtrain {

std::string_view mem_category_name(MemCategory c) {
  static constexpr std::string_view names[] = {"params", "grads", "optimizer", "activations",
                                               "gathered", "workspace", "comm", "other"};
  return names[int(c)];
}

void MemoryTracker::raise(std::atomic<int64_t>& peak, int64_t v) {
  int64_t p = peak.load(std::memory_order_relaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}

void MemoryTracker::on_alloc(MemCategory c, int64_t bytes) {
  raise(peak_[int(c)], cur_[int(c)].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise(total_peak_, total_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void MemoryTracker::on_free(MemCategory c, int64_t bytes) {
  cur_[int(c)].fetch_sub(bytes, std::memory_order_relaxed);
  total_.fetch_sub(bytes, std::memory_order_relaxed);
}

void MemoryTracker::reset_peaks() {
  for (int i = 0; i < kNumMemCategories; ++i) peak_[i].store(cur_[i].load());
  total_peak_.store(total_.load());
}

MemorySnapshot MemoryTracker::snapshot() const {
  MemorySnapshot s;
  for (int i = 0; i < kNumMemCategories; ++i) {
    s.current[i] = cur_[i].load();
    s.peak[i] = peak_[i].load();
  }
  s.total_current = total_current();
  s.total_peak = total_peak();
  s.cached = cached();
  s.page_padding = page_padding();
  return s;
}

std::string format_bytes(int64_t bytes) {
  char buf[32];
  double b = double(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

std::string MemorySnapshot::str() const {
  std::string s;
  for (int i = 0; i < kNumMemCategories; ++i) {
    if (peak[i] == 0) continue;
    s += std::string(mem_category_name(MemCategory(i))) + "=" + format_bytes(peak[i]) + " ";
  }
  return s + "total_peak=" + format_bytes(total_peak) + " cached=" + format_bytes(cached) +
         " page_padding=" + format_bytes(page_padding);
}

}  // namespace meshtrain
