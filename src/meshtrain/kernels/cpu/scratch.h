// Grow-only, 4096-byte aligned scratch memory shared by one thread's GEMM
// primitives: repeated calls reuse pages that are already faulted in.
#pragma once

#include <cstdlib>

#include "meshtrain/core/error.h"

namespace meshtrain::kernels {

class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(ptr_); }

  // At least `need` bytes. The size is recorded only once the allocation
  // succeeded: after a failure the old buffer is gone and the next call
  // allocates again (never a null or too small buffer).
  void* get(size_t need) {
    if (need > bytes_ || !ptr_) {
      std::free(ptr_);
      ptr_ = nullptr;
      bytes_ = 0;
      const size_t rounded = (need + 4095) / 4096 * 4096;
      void* p = rounded >= need ? std::aligned_alloc(4096, rounded) : nullptr;
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
