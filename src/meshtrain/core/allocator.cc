#include "meshtrain/core/allocator.h"

#include <new>

#include "meshtrain/core/error.h"
#include "meshtrain/core/host_pages.h"
#include "meshtrain/core/meta_memory.h"

namespace meshtrain {

namespace {

std::mutex registry_mu;
DeviceMemory registry[kNumDevices] = {{allocate_host_pages, release_host_pages, host_pages_footprint,
                                       host_zero, host_copy},
                                      {},
                                      meta_memory()};

}  // namespace

void register_device_memory(Device device, DeviceMemory memory) {
  std::lock_guard<std::mutex> lock(registry_mu);
  registry[int(device)] = memory;
}

CachingAllocator::CachingAllocator(Device device) : device_(device) {
  std::lock_guard<std::mutex> lock(registry_mu);
  memory_ = registry[int(device)];
  MT_REQUIRE(ConfigError, memory_.allocate && memory_.release, "no memory backend for device ", device_name(device),
             " in this build");
}

CachingAllocator::~CachingAllocator() { empty_cache(); }

size_t CachingAllocator::rounded_size(size_t bytes) {
  // 512 B granularity below 1 MiB, 64 KiB above: shapes repeat every step,
  // so near-exact reuse is the common case and waste stays small.
  if (bytes == 0) bytes = 1;
  const size_t g = bytes < (size_t(1) << 20) ? 512 : 65536;
  return (bytes + g - 1) / g * g;
}

int64_t CachingAllocator::padding_of(size_t block) const {
  return memory_.footprint ? int64_t(memory_.footprint(block) - block) : 0;
}

void* CachingAllocator::allocate(size_t bytes, MemCategory category) {
  const size_t sz = rounded_size(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Exact rounded-size reuse: shapes repeat every step, and a block keeps
    // its size so deallocate's accounting stays exact.
    auto it = free_.find(sz);
    if (it != free_.end()) {
      p = it->second;
      free_.erase(it);
      cached_bytes_ -= int64_t(sz);
    }
    tracker_.set_cached(cached_bytes_);
  }
  if (!p) {
    p = memory_.allocate(sz);
    if (!p) MT_THROW(Error, "out of ", device_name(device_), " memory allocating ", format_bytes(int64_t(sz)), " for ",
                     mem_category_name(category), " (in use: ", format_bytes(tracker_.total_current()), ")");
    tracker_.add_page_padding(padding_of(sz));
    std::lock_guard<std::mutex> lock(mu_);
    ++os_allocations_;
  }
  tracker_.on_alloc(category, int64_t(sz));
  return p;
}

void CachingAllocator::deallocate(void* p, size_t bytes, MemCategory category) {
  if (!p) return;
  const size_t sz = rounded_size(bytes);
  tracker_.on_free(category, int64_t(sz));
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(sz, p);
  cached_bytes_ += int64_t(sz);
  tracker_.set_cached(cached_bytes_);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [sz, p] : free_) {
    memory_.release(p);
    tracker_.add_page_padding(-padding_of(sz));
  }
  free_.clear();
  cached_bytes_ = 0;
  tracker_.set_cached(0);
}

}  // namespace meshtrain
