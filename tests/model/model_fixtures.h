// Tiny models and batches for model tests.
#pragma once

#include <vector>

#include "meshtrain/model/transformer.h"

namespace meshtrain::testing {

inline model::ModelConfig tiny_llama() {
  model::ModelConfig c;
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_hidden = 12;
  c.max_seq_len = 8;
  c.init_std = 0.3;  // large enough that every path carries signal
  c.seed = 5;
  return c;
}

inline model::ModelConfig tiny_gpt2() {
  model::ModelConfig c = tiny_llama();
  c.norm = model::NormKind::LayerNorm;
  c.positions = model::PositionKind::Learned;
  c.mlp = model::MlpKind::Gelu;
  c.tied_embeddings = true;
  c.bias = true;
  c.n_kv_heads = 2;
  return c;
}

// Columns [offset, offset + cols) of a [rows, total] matrix.
inline std::vector<float> columns_of(const std::vector<float>& whole, int64_t rows, int64_t total, int64_t offset,
                                     int64_t cols) {
  std::vector<float> mine;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = offset; c < offset + cols; ++c) mine.push_back(whole[size_t(r * total + c)]);
  return mine;
}

// The whole model in f64 (finite-difference checks) or f32.
inline model::ExecOptions exec_in(DType dtype, bool recompute = false) {
  model::ExecOptions e;
  e.recompute = recompute;
  e.precision = PrecisionPolicy::uniform(dtype);
  return e;
}

// Owns the arrays a TokenBatch points into.
struct OwnedBatch {
  int64_t rows = 0, seq = 0;
  std::vector<int32_t> tokens, targets, positions, segments;
  model::TokenBatch view() const {
    return {rows, seq, tokens.data(), targets.data(), positions.data(), segments.data()};
  }
};

// Two rows; row 0 packs two documents (segments 0 | 1), row 1 one document
// with a masked (prompt) target.
inline OwnedBatch tiny_batch() {
  OwnedBatch b;
  b.rows = 2;
  b.seq = 6;
  b.tokens = {1, 4, 7, 2, 9, 3, /**/ 5, 6, 8, 10, 0, 2};
  b.targets = {4, 7, -1, 9, 3, 5, /**/ -1, 8, 10, 0, 2, 1};
  b.positions = {0, 1, 2, 0, 1, 2, /**/ 0, 1, 2, 3, 4, 5};
  b.segments = {0, 0, 0, 1, 1, 1, /**/ 0, 0, 0, 0, 0, 0};
  return b;
}

}  // namespace meshtrain::testing
