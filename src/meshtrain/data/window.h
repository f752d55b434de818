// A planned window of rows: which document pieces fill each row, decided
// before any token is copied. Planning is cheap (lengths only), so every
// data-parallel replica plans the same global window and materializes just
// its own rows; the whole-window counts are known locally too.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/data/batch.h"
#include "meshtrain/data/dataset.h"

namespace meshtrain::data {

// Inputs doc[begin, begin + length), targets doc[begin + 1, begin + 1 + length):
// every target is the next token of the SAME document (docs/math.md, "Rule: packing keeps documents apart").
struct RowPiece {
  int64_t doc = 0;
  int64_t begin = 0;
  int64_t length = 0;
};

class Window {
 public:
  void clear(int64_t seq);
  void begin_row();
  void add_piece(const RowPiece& p);  // to the row opened last
  void set_seq(int64_t seq) { seq_ = seq; }

  int64_t rows() const { return int64_t(row_begin_.size()); }
  int64_t seq() const { return seq_; }
  int64_t row_length(int64_t r) const { return row_len_[size_t(r)]; }
  const RowPiece* row_pieces(int64_t r, int64_t* count) const;

  // Whole-window counts (docs/math.md (M.1)); equal to the sums over any partition of
  // the rows into replicas and micro-batches.
  int64_t non_pad_tokens() const { return tokens_; }
  int64_t supervised_targets() const { return tokens_; }  // every piece input has a target
  int64_t computed_positions() const { return rows() * seq_; }

  // Writes rows [first_row, first_row + n_rows) into `out` (clamped to the
  // window; a part past its end gives a batch of 0 rows). Padding: PAD id,
  // target kIgnore, position 0, a segment id of its own.
  void materialize(const TokenDataset& ds, int64_t first_row, int64_t n_rows, Batch* out) const;

 private:
  int64_t seq_ = 0;
  int64_t tokens_ = 0;
  std::vector<int64_t> row_begin_;  // index into pieces_
  std::vector<int64_t> row_len_;
  std::vector<RowPiece> pieces_;
};

}  // namespace meshtrain::data
