// This rank's share of a window under context parallelism (docs/math.md (M.48),
// model/ring_attention.h), and reproducible mode's canonical token order
// (docs/math.md (M.74)).
//
// Every row is cut into 2 V chunks of c = seq / (2 V) positions; chunk pair
// v is chunks v and 2 V - 1 - v, so every pair has the same causal attention
// work. V = cp by default; in reproducible mode V = the canonical block
// count C (cp | C), and pair v is canonical token block v. A cp rank r holds
// the V / cp consecutive pairs r V / cp ...; its micro-batch of B rows is
// laid out pair by pair, each pair as 2 B "pseudo-rows" of c positions
// (chunk v of rows 0..B-1, then chunk 2 V - 1 - v): so a canonical block is a
// contiguous range of tokens, and V = cp is the ring's layout. Tokens,
// targets (the label mask), position ids and segment ids travel with their
// chunk; the document ids of EVERY chunk are kept too, for masking the K/V
// blocks of the other ranks. Documents keep their lengths: a chunk boundary
// may fall anywhere inside a document.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/data/batch.h"
#include "meshtrain/model/token_batch.h"

namespace meshtrain::train {

class ContextShard {
 public:
  // canonical_blocks: reproducible mode's C (0: off).
  ContextShard(int cp_size, int cp_rank, int canonical_blocks = 0);
  int size() const { return cp_; }
  // V: the chunk pairs a row is cut into (1: the window as it is).
  int chunk_pairs() const { return pairs_; }

  // Shards `window`, whose micro-batches are groups of `micro_rows` rows
  // (the last may be shorter). With V = 1 the window is used as it is.
  void assign(const data::Batch& window, int64_t micro_rows);
  // The micro-batch of `rows` rows starting at row `first` (a multiple of
  // micro_rows) as this rank's model reads it: 2 * rows * V / cp
  // pseudo-rows of c positions (token_blocks = V / cp in reproducible mode).
  model::TokenBatch micro_batch(int64_t first, int64_t rows) const;
  // The positions of this rank's share: seq / cp per row.
  const data::Batch& local() const { return pairs_ > 1 ? local_ : *window_; }

 private:
  int cp_, rank_, pairs_;
  bool canonical_;
  int64_t micro_rows_ = 1;
  const data::Batch* window_ = nullptr;
  data::Batch local_;                   // rows: 2 V / cp per window row, seq: c
  std::vector<int32_t> chunk_segments_;  // per micro-batch [2 V, rows, c]
};

}  // namespace meshtrain::train
