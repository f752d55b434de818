// Bits per byte: a loss that compares models with different tokenizers.
// Every supervised target token stands for token_bytes(id) bytes of text
// (special tokens for none), so over the same text
//   bits/byte = (sum of target losses in nats) / ln 2 / (sum of their bytes)
// is the same quantity for a byte-level and a subword model. EOS targets
// add their loss but no bytes, as the end of a document is information too.
#pragma once

#include <cstdint>

#include "meshtrain/data/batch.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::data {

// Bytes behind the supervised targets of rows [row_begin, row_begin + rows).
int64_t supervised_bytes(const Batch& batch, const Tokenizer& tokenizer, int64_t row_begin, int64_t rows);
inline int64_t supervised_bytes(const Batch& batch, const Tokenizer& tokenizer) {
  return supervised_bytes(batch, tokenizer, 0, batch.rows);
}

// loss_sum_nats / ln 2 / bytes; 0 when there are no bytes.
double bits_per_byte(double loss_sum_nats, int64_t bytes);

}  // namespace meshtrain::data
