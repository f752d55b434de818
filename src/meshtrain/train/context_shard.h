// This rank's share of a window under context parallelism (docs/math.md (M.48),
// model/ring_attention.h): every row cut into 2 cp chunks of c = seq / (2 cp)
// positions, rank r keeping chunks r and 2 cp - 1 - r, so causal attention
// work is the same on every rank. Tokens, targets (the label mask),
// position ids and segment ids travel with their chunk; the document ids of
// EVERY chunk are kept too, for masking the K/V blocks that arrive from the
// other ranks. Documents keep their lengths: a chunk boundary may fall
// anywhere inside a document (no padding to a multiple of 2 cp).
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/data/batch.h"
#include "meshtrain/model/token_batch.h"

namespace meshtrain::train {

class ContextShard {
 public:
  ContextShard(int cp_size, int cp_rank) : cp_(cp_size), rank_(cp_rank) {}
  int size() const { return cp_; }

  // Shards `window`, whose micro-batches are groups of `micro_rows` rows
  // (the last may be shorter). With cp = 1 the window is used as it is.
  void assign(const data::Batch& window, int64_t micro_rows);
  // The micro-batch of `rows` rows starting at row `first` (a multiple of
  // micro_rows) as this rank's model reads it: 2 * rows pseudo-rows of c
  // positions (chunk r of every row, then chunk 2 cp - 1 - r).
  model::TokenBatch micro_batch(int64_t first, int64_t rows) const;
  // The positions of this rank's share: seq / cp per row.
  const data::Batch& local() const { return cp_ > 1 ? local_ : *window_; }

 private:
  int cp_, rank_;
  int64_t micro_rows_ = 1;
  const data::Batch* window_ = nullptr;
  data::Batch local_;                   // rows: 2 per window row, seq: c
  std::vector<int32_t> chunk_segments_;  // per micro-batch [2 cp, rows, c]
};

}  // namespace meshtrain::train
