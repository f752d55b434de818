// A batch of `rows` x `seq` token positions with everything a step needs:
// inputs, targets (the label mask), position ids and segment ids for the
// block-diagonal causal mask, plus the three counts of docs/math.md (M.1).
//
// Row-major int32 arrays of rows*seq elements:
//   tokens     input ids; padding positions hold the tokenizer's PAD id
//   targets    id to predict at this position, or kIgnore (-1): not supervised
//   positions  position ids, restarting at 0 at every document (piece)
//   segments   document number within the row (0, 1, ...); padding gets its
//              own id. Position i may attend to j iff j <= i and
//              segments[i] == segments[j] (block-diagonal causal mask).
// The storage is reused: reset() only resizes vectors, so after the first
// step a batch of the same or smaller size allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace meshtrain::data {

inline constexpr int32_t kIgnore = -1;

struct Batch {
  int64_t rows = 0;
  int64_t seq = 0;
  std::vector<int32_t> tokens, targets, positions, segments;
  std::vector<int32_t> row_lengths;  // l_b: non-pad input tokens of row b (docs/math.md (M.1)-(M.2))

  // (M.1) counts, filled by the loader (recount() recomputes them).
  int64_t non_pad_tokens = 0;      // sum_b l_b
  int64_t computed_positions = 0;  // rows * seq: what the model actually computes
  int64_t supervised_targets = 0;  // targets != kIgnore: n of (M.1), (M.4)

  // Resizes to rows x seq, fills every position as padding (PAD, kIgnore,
  // position 0, segment 0) and zeroes the counts.
  void reset(int64_t rows, int64_t seq, int32_t pad_id);
  void recount();
  // (M.2) rho_pad = 1 - sum_b l_b / (B * l_max), with l_max = seq.
  double padding_ratio() const;

  int64_t at(int64_t row, int64_t i) const { return row * seq + i; }
  int32_t* row_tokens(int64_t r) { return tokens.data() + r * seq; }
  int32_t* row_targets(int64_t r) { return targets.data() + r * seq; }
  int32_t* row_positions(int64_t r) { return positions.data() + r * seq; }
  int32_t* row_segments(int64_t r) { return segments.data() + r * seq; }

  // Copies rows [begin, begin + n) into `out` (reusing its storage), e.g. a
  // micro-batch out of a replica's part of the window.
  void copy_rows(int64_t begin, int64_t n, Batch* out) const;
};

}  // namespace meshtrain::data
