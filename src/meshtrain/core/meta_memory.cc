#include "meshtrain/core/meta_memory.h"

#include <sys/mman.h>

#include <map>
#include <mutex>

namespace meshtrain {

namespace {

std::mutex mu;
std::map<void*, size_t>& blocks() {  // release gets the pointer alone
  static std::map<void*, size_t> b;
  return b;
}
size_t reserved = 0;

void* allocate_meta(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  blocks()[p] = bytes;
  reserved += bytes;
  return p;
}

void release_meta(void* p) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = blocks().find(p);
    if (it == blocks().end()) return;
    bytes = it->second;
    reserved -= bytes;
    blocks().erase(it);
  }
  munmap(p, bytes);
}

void meta_zero(void*, size_t) {}
void meta_copy(void*, const void*, size_t) {}

}  // namespace

DeviceMemory meta_memory() { return {allocate_meta, release_meta, nullptr, meta_zero, meta_copy}; }

size_t meta_reserved_bytes() {
  std::lock_guard<std::mutex> lock(mu);
  return reserved;
}

bool is_meta_pointer(const void* p) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = blocks().upper_bound(const_cast<void*>(p));
  if (it == blocks().begin()) return false;
  --it;
  return static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second;
}

}  // namespace meshtrain
