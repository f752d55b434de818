// Per-rank memory accounting by category: current and peak bytes, plus the
// bytes the caching allocator holds without handing them out.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain {

enum class MemCategory : uint8_t {
  Params, Grads, Optimizer, Activations, Gathered, Workspace, Comm, Other, kCount
};
inline constexpr int kNumMemCategories = int(MemCategory::kCount);
std::string_view mem_category_name(MemCategory c);

struct MemorySnapshot {
  std::array<int64_t, kNumMemCategories> current{};
  std::array<int64_t, kNumMemCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
  int64_t cached = 0;  // held by the allocator, free for reuse
  int64_t page_padding = 0;  // held by the allocator's OS blocks beyond their sizes (huge-page tails)
  std::string str() const;  // "params=1.2MiB grads=... peak=..."
};

class MemoryTracker {
 public:
  void on_alloc(MemCategory c, int64_t bytes);
  void on_free(MemCategory c, int64_t bytes);
  void set_cached(int64_t bytes) { cached_.store(bytes, std::memory_order_relaxed); }
  void add_page_padding(int64_t bytes) { page_padding_.fetch_add(bytes, std::memory_order_relaxed); }

  int64_t current(MemCategory c) const { return cur_[int(c)].load(std::memory_order_relaxed); }
  int64_t peak(MemCategory c) const { return peak_[int(c)].load(std::memory_order_relaxed); }
  int64_t total_current() const { return total_.load(std::memory_order_relaxed); }
  int64_t total_peak() const { return total_peak_.load(std::memory_order_relaxed); }
  int64_t cached() const { return cached_.load(std::memory_order_relaxed); }
  int64_t page_padding() const { return page_padding_.load(std::memory_order_relaxed); }
  // Peaks restart from the current values (e.g. at the start of a step).
  void reset_peaks();
  MemorySnapshot snapshot() const;

 private:
  static void raise(std::atomic<int64_t>& peak, int64_t v);
  std::array<std::atomic<int64_t>, kNumMemCategories> cur_{};
  std::array<std::atomic<int64_t>, kNumMemCategories> peak_{};
  std::atomic<int64_t> total_{0}, total_peak_{0}, cached_{0}, page_padding_{0};
};

std::string format_bytes(int64_t bytes);  // "1.50 MiB"

}  // namespace meshtrain
