// Embedding lookup. ids [n] (int32), table [vocab, dim], out / dout [n, dim].
#include "meshtrain/kernels/cpu/embedding.h"

#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {
namespace {

// Checked up front on the calling thread: a throw must not escape an OpenMP region.
void check_ids(const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    MT_REQUIRE(DataError, ids[i] >= 0 && ids[i] < vocab, "embedding: token id ", ids[i], " at position ", i,
               " is outside the vocabulary [0, ", vocab, ")");
}

}  // namespace

template <typename T>
void embedding_forward(const int32_t* ids, int64_t n, const T* table, int64_t vocab, int64_t dim, T* out) {
  check_ids(ids, n, vocab);
  parallel_range(n, n * dim, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::memcpy(out + i * dim, table + int64_t(ids[i]) * dim, sizeof(T) * dim);
  });
}

template <typename T>
void embedding_backward(const int32_t* ids, int64_t n, const T* dout, int64_t vocab, int64_t dim, T* dtable) {
  check_ids(ids, n, vocab);
  // Parallel over embedding dims, tokens in order inside each range: every
  // element of dtable is accumulated in token order whatever the thread
  // count, and no two threads touch the same element.
  parallel_range(dim, n * dim, [&](int64_t d0, int64_t d1) {
    for (int64_t i = 0; i < n; ++i) {
      T* dst = dtable + int64_t(ids[i]) * dim;
      const T* src = dout + i * dim;
#pragma omp simd
      for (int64_t j = d0; j < d1; ++j) dst[j] += src[j];
    }
  });
}

#define MT_INSTANTIATE(T)                                                                           \
  template void embedding_forward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, T*);  \
  template void embedding_backward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, T*);
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
