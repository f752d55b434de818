// Embedding lookup. ids [n] (int32), table [vocab, dim], out [n, dim].
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

// Throws DataError naming the position if an id is outside [0, vocab).
template <typename T>
void embedding_forward(const int32_t* ids, int64_t n, const T* table, int64_t vocab, int64_t dim, T* out);
// dtable[ids[i]] += dout[i]  (ACCUMULATES; deterministic order).
template <typename T>
void embedding_backward(const int32_t* ids, int64_t n, const T* dout, int64_t vocab, int64_t dim, T* dtable);

}  // namespace meshtrain::kernels
