// Padded mode with length bucketing (docs/math.md, "Rule: length bucketing").
// One document per row, truncated to seq_len + 1 tokens (seq_len input/target
// pairs). A pool of K windows' worth of documents is drawn from the sampler,
// sorted by length (stable, so ties keep draw order), cut into K windows of
// consecutive lengths, and the windows are emitted in a random order keyed by
// (seed, pool index): similar lengths share a window, randomization stays. A
// window's seq is its longest row, so every replica and micro-batch of the
// window sees the same padded length and computed_positions
// = window_rows * l_max is the same under any data-parallel layout.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/data/dataset.h"
#include "meshtrain/data/sampler.h"
#include "meshtrain/data/window.h"

namespace meshtrain::data {

// Input/target pairs of a document of doc_len tokens in a row of seq_len.
inline int64_t padded_row_length(int64_t doc_len, int64_t seq_len) {
  return (doc_len < seq_len + 1 ? doc_len : seq_len + 1) - 1;
}

struct BucketPool {
  int64_t index = 0;        // pools drawn before this one
  SamplerState start;       // sampler state when this pool was drawn
  int64_t window_rows = 0;  // 0: no pool drawn yet
  int64_t emitted = 0;      // windows of this pool already returned
  std::vector<int64_t> docs;   // sorted by length; window k = docs[k*W, (k+1)*W)
  std::vector<int64_t> order;  // emission order of window numbers

  int64_t num_windows() const { return window_rows == 0 ? 0 : (int64_t(docs.size()) + window_rows - 1) / window_rows; }
  bool has_next() const { return emitted < num_windows(); }
};

// Draws pool_windows * window_rows documents (fewer at the end of a finite
// stream; documents with < 2 tokens are skipped) into `pool`, which becomes
// pool number `index`, and fixes its emission order.
void draw_bucket_pool(const TokenDataset& ds, DocumentSampler& sampler, int64_t seq_len, int64_t window_rows,
                      int64_t pool_windows, uint64_t seed, int64_t index, BucketPool* pool);

// Plans the pool's next window into `window` (pool.has_next() required),
// its seq rounded up to a multiple of seq_multiple (a divisor of seq_len:
// sequence parallelism splits every row's positions over its ranks).
void plan_padded_window(const TokenDataset& ds, BucketPool& pool, int64_t seq_len, Window* window,
                        int64_t seq_multiple = 1);

}  // namespace meshtrain::data
