// What the model reads of a micro-batch: int32 arrays [rows, seq].
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>

#include "meshtrain/core/tensor.h"

namespace meshtrain::model {

struct TokenBatch {
  int64_t rows = 0, seq = 0;
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;    // -1: not supervised (label mask)
  const int32_t* positions = nullptr;  // position within the token's document
  const int32_t* segments = nullptr;   // document id within the row; null: one per row
  // Context parallelism (ring_attention.h): rows are 2 B pseudo-rows (this
  // rank's two chunks of B rows) and this holds the document ids of EVERY
  // chunk of those rows, [2 cp, B, seq] (null: one document per row).
  const int32_t* chunk_segments = nullptr;
  int64_t n() const { return rows * seq; }
};

// Activation tensors come from the rank's caching allocator, so the same
// blocks are reused every step.
inline Tensor activation(const std::shared_ptr<CachingAllocator>& alloc, DType dtype,
                         std::initializer_list<int64_t> dims, MemCategory cat = MemCategory::Activations) {
  return Tensor::empty(Shape(dims), dtype, alloc, cat);
}

}  // namespace meshtrain::model
