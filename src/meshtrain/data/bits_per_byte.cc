#include "meshtrain/data/bits_per_byte.h"

#include <cmath>
#include <numbers>

namespace meshtrain::data {

int64_t supervised_bytes(const Batch& b, const Tokenizer& tok, int64_t row_begin, int64_t rows) {
  int64_t bytes = 0;
  const int32_t* t = b.targets.data() + row_begin * b.seq;
  for (int64_t i = 0; i < rows * b.seq; ++i)
    if (t[i] != kIgnore) bytes += tok.token_bytes(t[i]);
  return bytes;
}

double bits_per_byte(double loss_sum_nats, int64_t bytes) {
  return bytes > 0 ? loss_sum_nats / std::numbers::ln2 / double(bytes) : 0.0;
}

}  // namespace meshtrain::data
