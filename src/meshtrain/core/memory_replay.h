// Symbolic allocation: the caching allocator's rounding and the tracker's
// per-category accounting without memory. The planner's mirrors of the
// model, the executor and the engine allocate SymTensors in the order the
// real code allocates Tensors; a SymTensor gives its bytes back when its last
// copy goes, as a Tensor's storage does, so lifetimes follow the same
// ownership (saved state, queued weight jobs, in-flight sends) and the
// replayed peaks are the peaks a run's MemoryTracker would record.
#pragma once

#include <cstdint>
#include <memory>

#include "meshtrain/core/dtype.h"
#include "meshtrain/core/memory_tracker.h"

namespace meshtrain {

class MemoryReplay;

class SymTensor {
 public:
  SymTensor() = default;
  bool defined() const { return token_ != nullptr; }
  int64_t bytes() const;  // as rounded by the allocator
  int64_t numel() const;
  DType dtype() const;
  MemCategory category() const;
  bool shares_storage(const SymTensor& o) const { return token_ == o.token_; }
  // Names the storage without keeping it (Tensor::raw() for a job's dy source).
  const void* storage_id() const { return token_.get(); }

 private:
  friend class MemoryReplay;
  struct Token {
    MemoryReplay* replay;
    MemCategory category;
    DType dtype;
    int64_t numel, bytes;
    ~Token();
  };
  std::shared_ptr<Token> token_;
};

class MemoryReplay {
 public:
  MemoryReplay() = default;
  MemoryReplay(const MemoryReplay&) = delete;
  MemoryReplay& operator=(const MemoryReplay&) = delete;

  // numel elements of dtype, rounded as CachingAllocator::allocate rounds
  // (a zero-sized tensor still takes one granule).
  SymTensor alloc(int64_t numel, DType dtype, MemCategory category);
  // The same tensor as a matmul operand of `dtype` (model::as_operand): itself
  // when the type matches, else a converted copy in `category`.
  SymTensor as_operand(const SymTensor& t, DType dtype, MemCategory category = MemCategory::Activations);

  MemoryTracker& tracker() { return tracker_; }
  const MemoryTracker& tracker() const { return tracker_; }

 private:
  friend struct SymTensor::Token;
  MemoryTracker tracker_;
};

}  // namespace meshtrain
