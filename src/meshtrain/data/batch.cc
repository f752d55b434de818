#include "meshtrain/data/batch.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

void Batch::reset(int64_t r, int64_t s, int32_t pad_id) {
  MT_CHECK(r >= 0 && s >= 0, "batch shape ", r, "x", s);
  rows = r;
  seq = s;
  const size_t n = size_t(r * s);
  tokens.resize(n);
  targets.resize(n);
  positions.resize(n);
  segments.resize(n);
  row_lengths.resize(size_t(r));
  std::fill(tokens.begin(), tokens.end(), pad_id);
  std::fill(targets.begin(), targets.end(), kIgnore);
  std::fill(positions.begin(), positions.end(), 0);
  std::fill(segments.begin(), segments.end(), 0);
  std::fill(row_lengths.begin(), row_lengths.end(), 0);
  non_pad_tokens = computed_positions = supervised_targets = 0;
}

void Batch::recount() {
  non_pad_tokens = 0;
  for (int32_t l : row_lengths) non_pad_tokens += l;
  computed_positions = rows * seq;
  supervised_targets = std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnore; });
}

double Batch::padding_ratio() const {
  if (computed_positions == 0) return 0.0;
  return 1.0 - double(non_pad_tokens) / double(computed_positions);
}

void Batch::copy_rows(int64_t begin, int64_t n, Batch* out) const {
  MT_CHECK(begin >= 0 && n >= 0 && begin + n <= rows, "copy_rows [", begin, ", +", n, ") of ", rows, " rows");
  MT_CHECK(out != this, "copy_rows into itself");
  out->reset(n, seq, 0);
  const size_t off = size_t(begin * seq), len = size_t(n * seq);
  std::copy_n(tokens.begin() + off, len, out->tokens.begin());
  std::copy_n(targets.begin() + off, len, out->targets.begin());
  std::copy_n(positions.begin() + off, len, out->positions.begin());
  std::copy_n(segments.begin() + off, len, out->segments.begin());
  std::copy_n(row_lengths.begin() + begin, n, out->row_lengths.begin());
  out->recount();
}

}  // namespace meshtrain::data
