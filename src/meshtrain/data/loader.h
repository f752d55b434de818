// BatchLoader: a deterministic GLOBAL stream of rows over a TokenDataset.
//
// Data parallelism: an update consumes one window of W = R * G * B rows.
// Every replica calls next_window(W, ...) once per update with the same W
// and materializes only its own rows, e.g. replica r takes rows
// [r*G*B, (r+1)*G*B) and cuts G micro-batches of B rows out of them (or
// calls window().materialize() per micro-batch). The window's rows depend
// only on (dataset, config, state), never on R or G, so changing R and G
// with R*G*B fixed feeds the same rows to the update (docs/math.md (M.4), (M.62)).
//
// Padded mode: a window's seq is its longest row (padding.h), the same for
// all replicas and micro-batches of that window.
//
// State: state()/restore() capture the sampler position plus the packing
// carry (packed) or the current bucket pool (padded), so a restored loader
// produces exactly the rows the saved one would have produced next.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "meshtrain/data/batch.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/packing.h"
#include "meshtrain/data/padding.h"
#include "meshtrain/data/sampler.h"
#include "meshtrain/data/window.h"

namespace meshtrain::data {

enum class BatchMode { Packed, Padded };
const char* batch_mode_name(BatchMode m);
BatchMode parse_batch_mode(const std::string& name);  // ConfigError on unknown names

struct LoaderConfig {
  BatchMode mode = BatchMode::Packed;
  int64_t seq_len = 256;     // positions per row (padded: the cap; rows may be shorter)
  uint64_t seed = 0;
  int64_t bucket_pool = 16;  // padded: windows per length-sorted pool (K)
  int64_t seq_multiple = 1;  // padded: a window's seq rounded up to a multiple (sequence parallelism)
  bool shuffle = true;       // false: documents in stored order
  int64_t max_epochs = 0;    // 0: endless; else the stream ends after that many epochs

  // One pass over the split in stored order, no bucketing: for validation.
  static LoaderConfig validation(BatchMode mode, int64_t seq_len, int64_t seq_multiple = 1);
};

struct LoaderState {
  BatchMode mode = BatchMode::Packed;
  int64_t seq_len = 0;
  int64_t num_documents = 0;
  SamplerState sampler;
  PackCarry carry;                // packed
  int64_t pool_index = 0;         // padded: pools drawn so far
  SamplerState pool_start;        // padded: sampler state when the current pool was drawn
  int64_t pool_window_rows = 0;   // padded: 0 when no pool is active
  int64_t pool_emitted = 0;       // padded: windows already taken from the pool
  int64_t windows = 0;            // windows produced so far
  int64_t rows = 0;               // rows produced so far
  bool operator==(const LoaderState&) const = default;
};
// {"version":1,"mode":"packed","seq_len":..,"num_documents":..,
//  "sampler":{"seed":..,"epoch":..,"cursor":..},"carry":{"doc":..,"offset":..},
//  "pool":{"index":..,"start":{sampler},"window_rows":..,"emitted":..},
//  "windows":..,"rows":..}
void to_json(nlohmann::json& j, const LoaderState& s);
void from_json(const nlohmann::json& j, LoaderState& s);  // DataError when malformed

class BatchLoader {
 public:
  // Keeps a (cheap, shared) copy of the dataset. DataError when the split
  // has no document with at least 2 tokens.
  BatchLoader(const TokenDataset& dataset, LoaderConfig config);

  // Plans the next global window of `window_rows` rows and advances past all
  // of it. The reference stays valid until the next call. Its rows() is
  // window_rows except at the end of a finite stream (0 once exhausted).
  const Window& next_window(int64_t window_rows);
  // next_window(window_rows) then materialize rows [first_row, first_row +
  // n_rows) into `out`. Returns false when the stream was already exhausted.
  bool next_window(int64_t window_rows, int64_t first_row, int64_t n_rows, Batch* out);
  // Single rank: the next `rows` rows.
  bool next(int64_t rows, Batch* out) { return next_window(rows, 0, rows, out); }

  const Window& window() const { return window_; }
  const TokenDataset& dataset() const { return ds_; }
  const LoaderConfig& config() const { return cfg_; }
  bool exhausted() const;

  LoaderState state() const;
  // DataError when the state belongs to another mode, seq_len, seed or
  // dataset size.
  void restore(const LoaderState& s);

 private:
  void plan_packed(int64_t window_rows);
  void plan_padded(int64_t window_rows);

  TokenDataset ds_;
  LoaderConfig cfg_;
  DocumentSampler sampler_;
  PackCarry carry_;
  BucketPool pool_;
  int64_t pools_drawn_ = 0;
  int64_t windows_ = 0, rows_ = 0;
  Window window_;
};

// Iterates a split once in stored order (periodic validation loss):
//   ValidationIterator it(val, BatchMode::Packed, 256);
//   while (it.next(rows, &batch)) { ...sum loss / batch.supervised_targets... }
// The last batch may have fewer rows. The window form serves data-parallel
// evaluation the same way as BatchLoader.
class ValidationIterator {
 public:
  ValidationIterator(const TokenDataset& dataset, BatchMode mode, int64_t seq_len, int64_t seq_multiple = 1)
      : loader_(dataset, LoaderConfig::validation(mode, seq_len, seq_multiple)) {}
  bool next(int64_t rows, Batch* out) { return loader_.next(rows, out) && out->rows > 0; }
  bool next_window(int64_t window_rows, int64_t first_row, int64_t n_rows, Batch* out) {
    return loader_.next_window(window_rows, first_row, n_rows, out);
  }
  void rewind() { loader_ = BatchLoader(loader_.dataset(), loader_.config()); }

 private:
  BatchLoader loader_;
};

}  // namespace meshtrain::data
