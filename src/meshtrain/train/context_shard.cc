#include "meshtrain/train/context_shard.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/model/ring_attention.h"

namespace meshtrain::train {

ContextShard::ContextShard(int cp_size, int cp_rank, int canonical_blocks)
    : cp_(cp_size), rank_(cp_rank), pairs_(canonical_blocks > 0 ? canonical_blocks : cp_size),
      canonical_(canonical_blocks > 0) {
  MT_REQUIRE(ConfigError, pairs_ % cp_ == 0, "training.reproducible_blocks = ", pairs_,
             " canonical token blocks do not split over parallel.cp = ", cp_, " ranks (", pairs_, " % ", cp_, " = ",
             pairs_ % cp_, ")");
}

void ContextShard::assign(const data::Batch& window, int64_t micro_rows) {
  window_ = &window;
  micro_rows_ = std::max<int64_t>(micro_rows, 1);
  if (pairs_ == 1 && !canonical_) return;
  const int64_t chunks = 2 * int64_t(pairs_), mine = pairs_ / cp_;
  MT_REQUIRE(ConfigError, window.seq % chunks == 0, "the rows are cut into ", chunks, " chunks (2 x ",
             canonical_ ? "training.reproducible_blocks" : "parallel.cp", "), but the batch has ", window.seq,
             " positions per row (", window.seq, " % ", chunks, " = ", window.seq % chunks, ")");
  const int64_t c = window.seq / chunks, W = window.rows;
  local_.rows = 2 * mine * W;
  local_.seq = c;
  local_.tokens.resize(size_t(local_.rows * c));
  local_.targets.resize(local_.tokens.size());
  local_.positions.resize(local_.tokens.size());
  local_.segments.resize(local_.tokens.size());
  chunk_segments_.resize(size_t(W * window.seq));
  for (int64_t first = 0; first < W; first += micro_rows_) {
    const int64_t B = std::min(micro_rows_, W - first);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = (first + b) * window.seq;
      for (int64_t j = 0; j < mine; ++j)
        for (int h = 0; h < 2; ++h) {
          const int64_t from = row + model::cp_chunk(pairs_, int(rank_ * mine + j), h) * c;
          // pseudo-row (2 j + h) B + b of the micro-batch
          const int64_t to = (2 * mine * first + (2 * j + h) * B + b) * c;
          auto copy = [&](const std::vector<int32_t>& src, std::vector<int32_t>& dst) {
            std::copy(src.begin() + from, src.begin() + from + c, dst.begin() + to);
          };
          copy(window.tokens, local_.tokens);
          copy(window.targets, local_.targets);
          copy(window.positions, local_.positions);
          copy(window.segments, local_.segments);
        }
      for (int64_t k = 0; k < chunks; ++k)  // [2 V, B, c] per micro-batch
        std::copy(window.segments.begin() + row + k * c, window.segments.begin() + row + (k + 1) * c,
                  chunk_segments_.begin() + first * window.seq + (k * B + b) * c);
    }
  }
}

model::TokenBatch ContextShard::micro_batch(int64_t first, int64_t rows) const {
  MT_CHECK(window_ && first + rows <= window_->rows, "micro-batch [", first, ", +", rows, ") of an unassigned window");
  if (pairs_ == 1 && !canonical_) {
    const data::Batch& w = *window_;
    const int64_t off = first * w.seq;
    return {rows, w.seq, w.tokens.data() + off, w.targets.data() + off, w.positions.data() + off,
            w.segments.data() + off};
  }
  MT_CHECK(first % micro_rows_ == 0, "micro-batch at row ", first, " not on a multiple of ", micro_rows_);
  const int64_t pseudo = 2 * (pairs_ / cp_), off = pseudo * first * local_.seq;
  return {pseudo * rows,
          local_.seq,
          local_.tokens.data() + off,
          local_.targets.data() + off,
          local_.positions.data() + off,
          local_.segments.data() + off,
          chunk_segments_.data() + first * window_->seq,
          canonical_ ? pairs_ / cp_ : 0};
}

}  // namespace meshtrain::train
