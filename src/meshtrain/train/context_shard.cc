#include "meshtrain/train/context_shard.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/model/ring_attention.h"

namespace meshtrain::train {

void ContextShard::assign(const data::Batch& window, int64_t micro_rows) {
  window_ = &window;
  micro_rows_ = std::max<int64_t>(micro_rows, 1);
  if (cp_ == 1) return;
  const int64_t chunks = 2 * cp_;
  MT_REQUIRE(ConfigError, window.seq % chunks == 0, "context parallelism cuts every row into 2 x parallel.cp = ",
             chunks, " chunks, but the batch has ", window.seq, " positions per row (", window.seq, " % ", chunks,
             " = ", window.seq % chunks, ")");
  const int64_t c = window.seq / chunks, W = window.rows;
  local_.rows = 2 * W;
  local_.seq = c;
  local_.tokens.resize(size_t(2 * W * c));
  local_.targets.resize(local_.tokens.size());
  local_.positions.resize(local_.tokens.size());
  local_.segments.resize(local_.tokens.size());
  chunk_segments_.resize(size_t(W * window.seq));
  for (int64_t first = 0; first < W; first += micro_rows_) {
    const int64_t B = std::min(micro_rows_, W - first);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = (first + b) * window.seq;
      for (int h = 0; h < 2; ++h) {
        const int64_t from = row + model::cp_chunk(cp_, rank_, h) * c;
        const int64_t to = (2 * first + h * B + b) * c;  // pseudo-row h * B + b of the micro-batch
        auto copy = [&](const std::vector<int32_t>& src, std::vector<int32_t>& dst) {
          std::copy(src.begin() + from, src.begin() + from + c, dst.begin() + to);
        };
        copy(window.tokens, local_.tokens);
        copy(window.targets, local_.targets);
        copy(window.positions, local_.positions);
        copy(window.segments, local_.segments);
      }
      for (int64_t k = 0; k < chunks; ++k)  // [2 cp, B, c] per micro-batch
        std::copy(window.segments.begin() + row + k * c, window.segments.begin() + row + (k + 1) * c,
                  chunk_segments_.begin() + first * window.seq + (k * B + b) * c);
    }
  }
}

model::TokenBatch ContextShard::micro_batch(int64_t first, int64_t rows) const {
  MT_CHECK(window_ && first + rows <= window_->rows, "micro-batch [", first, ", +", rows, ") of an unassigned window");
  if (cp_ == 1) {
    const data::Batch& w = *window_;
    const int64_t off = first * w.seq;
    return {rows, w.seq, w.tokens.data() + off, w.targets.data() + off, w.positions.data() + off,
            w.segments.data() + off};
  }
  MT_CHECK(first % micro_rows_ == 0, "micro-batch at row ", first, " not on a multiple of ", micro_rows_);
  const int64_t off = 2 * first * local_.seq;
  return {2 * rows,
          local_.seq,
          local_.tokens.data() + off,
          local_.targets.data() + off,
          local_.positions.data() + off,
          local_.segments.data() + off,
          chunk_segments_.data() + first * window_->seq};
}

}  // namespace meshtrain::train
