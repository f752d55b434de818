// Grow-only scratch memory shared by one thread's GEMM primitives (64-byte
// aligned; from 1 MiB on, whole huge pages: host_pages.h): repeated calls
// reuse pages that are already faulted in.
#pragma once

#include <cstddef>

#include "meshtrain/core/error.h"
#include "meshtrain/core/host_pages.h"

namespace meshtrain::kernels {

class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release_host_pages(ptr_); }

  // At least `need` bytes. The size is recorded only once the allocation
  // succeeded: after a failure the old buffer is gone and the next call
  // allocates again (never a null or too small buffer).
  void* get(size_t need) {
    if (need > bytes_ || !ptr_) {
      release_host_pages(ptr_);
      ptr_ = nullptr;
      bytes_ = 0;
      // From half a huge page on, whole huge pages (the packed GEMM's panels
      // are streamed through every tile: one TLB entry instead of hundreds).
      const size_t unit = need >= kHugePageBytes / 2 ? kHugePageBytes : 4096;
      const size_t rounded = (need + unit - 1) / unit * unit;
      void* p = rounded >= need ? allocate_host_pages(rounded) : nullptr;
      MT_REQUIRE(InternalError, p != nullptr, "gemm scratchpad allocation of ", need, " bytes failed");
      ptr_ = p;
      bytes_ = rounded;
    }
    return ptr_;
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace meshtrain::kernels
