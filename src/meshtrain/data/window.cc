#include "meshtrain/data/window.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

void Window::clear(int64_t seq) {
  seq_ = seq;
  tokens_ = 0;
  row_begin_.clear();
  row_len_.clear();
  pieces_.clear();
}

void Window::begin_row() {
  row_begin_.push_back(int64_t(pieces_.size()));
  row_len_.push_back(0);
}

void Window::add_piece(const RowPiece& p) {
  MT_CHECK(!row_begin_.empty(), "add_piece before begin_row");
  MT_CHECK(p.length > 0, "empty row piece");
  pieces_.push_back(p);
  row_len_.back() += p.length;
  tokens_ += p.length;
}

const RowPiece* Window::row_pieces(int64_t r, int64_t* count) const {
  const int64_t b = row_begin_[size_t(r)];
  const int64_t e = r + 1 < rows() ? row_begin_[size_t(r + 1)] : int64_t(pieces_.size());
  *count = e - b;
  return pieces_.data() + b;
}

void Window::materialize(const TokenDataset& ds, int64_t first_row, int64_t n_rows, Batch* out) const {
  MT_REQUIRE(ConfigError, first_row >= 0 && n_rows >= 0, "window rows [", first_row, ", +", n_rows,
             ") must be non-negative");
  const int64_t n = std::clamp(rows() - first_row, int64_t(0), n_rows);
  out->reset(n, seq_, ds.tokenizer().pad_id());
  for (int64_t r = 0; r < n; ++r) {
    int64_t count = 0;
    const RowPiece* pieces = row_pieces(first_row + r, &count);
    int32_t* tok = out->row_tokens(r);
    int32_t* tgt = out->row_targets(r);
    int32_t* pos = out->row_positions(r);
    int32_t* seg = out->row_segments(r);
    int64_t at = 0;
    int32_t segment = 0;
    for (int64_t k = 0; k < count; ++k, ++segment) {
      const RowPiece& p = pieces[k];
      MT_CHECK(at + p.length <= seq_, "row overflows the window length");
      const TokenSpan doc = ds.document(p.doc);
      doc.copy_to(p.begin, p.length, tok + at);
      doc.copy_to(p.begin + 1, p.length, tgt + at);  // shifted by one inside the same document
      for (int64_t i = 0; i < p.length; ++i) {
        pos[at + i] = int32_t(i);  // restart per document piece
        seg[at + i] = segment;
      }
      at += p.length;
    }
    std::fill(seg + at, seg + seq_, segment);  // padding: a segment of its own
    out->row_lengths[size_t(r)] = int32_t(at);
  }
  out->recount();
}

}  // namespace meshtrain::data
