// Staging buffers of the MPI backend (bf16 reduced in f32, aliased
// reduce-scatter, in-place all-to-all), reused between calls so no call
// faults in fresh pages.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace meshtrain::comm::mpi {

class StagingPool {
 public:
  struct Buf {
    char* p;
    size_t cap;
  };
  StagingPool() = default;
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool() {
    for (auto& b : free_) std::free(b.p);
  }
  // The smallest free buffer of at least `bytes`, else a new one.
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

 private:
  std::mutex mu_;
  std::vector<Buf> free_;
};

}  // namespace meshtrain::comm::mpi
