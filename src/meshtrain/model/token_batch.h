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
  // Chunk pairs (train/context_shard.h): rows are 2 B pseudo-rows per pair
  // this rank holds (chunks v and 2 V - 1 - v of B rows) and this holds the
  // document ids of EVERY chunk of those rows, [2 V, B, seq] (null: rows as
  // they are, or one document per row).
  const int32_t* chunk_segments = nullptr;
  // Reproducible mode's canonical token blocks in this micro-batch (one per
  // chunk pair: contiguous, equal ranges of tokens, docs/math.md (M.74));
  // 0: tokens in their rows' order, summed as they come.
  int64_t token_blocks = 0;
  int64_t n() const { return rows * seq; }
};

// Activation tensors come from the rank's caching allocator, so the same
// blocks are reused every step.
inline Tensor activation(const std::shared_ptr<CachingAllocator>& alloc, DType dtype,
                         std::initializer_list<int64_t> dims, MemCategory cat = MemCategory::Activations) {
  return Tensor::empty(Shape(dims), dtype, alloc, cat);
}

}  // namespace meshtrain::model
