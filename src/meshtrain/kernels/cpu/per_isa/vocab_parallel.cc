// Vocabulary-parallel embedding and cross-entropy: ids/targets [n], table
// [Vl, dim], logits [n, Vl] (columns [vocab_begin, vocab_begin + Vl) of V).
// The row loops are those of the serial kernels (embedding.cc,
// cross_entropy.cc; softmax_rows.h), so one rank holding the whole
// vocabulary computes the same bits.
#include "meshtrain/kernels/cpu/vocab_parallel.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"
#include "meshtrain/kernels/cpu/per_isa/softmax_rows.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {
namespace {

using detail::exp_t;
using detail::row_max;

bool in_slice(int32_t id, int64_t begin, int64_t Vl) { return id >= begin && id < begin + Vl; }

}  // namespace

template <typename T>
void embedding_slice_forward(const int32_t* ids, int64_t n, const T* table, int64_t vocab_begin, int64_t Vl,
                             int64_t V, int64_t dim, T* out) {
  // Checked up front on the calling thread: a throw must not escape an OpenMP region.
  for (int64_t i = 0; i < n; ++i)
    MT_REQUIRE(DataError, ids[i] >= 0 && ids[i] < V, "embedding: token id ", ids[i], " at position ", i,
               " is outside the vocabulary [0, ", V, ")");
  parallel_range(n, n * dim, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (in_slice(ids[i], vocab_begin, Vl))
        std::memcpy(out + i * dim, table + (int64_t(ids[i]) - vocab_begin) * dim, sizeof(T) * dim);
      else
        std::memset(out + i * dim, 0, sizeof(T) * dim);
    }
  });
}

template <typename T>
void embedding_slice_backward(const int32_t* ids, int64_t n, const T* dout, int64_t vocab_begin, int64_t Vl,
                              int64_t dim, T* dtable) {
  // Parallel over embedding dims, tokens in order inside each range (as embedding.cc).
  parallel_range(dim, n * dim, [&](int64_t d0, int64_t d1) {
    for (int64_t i = 0; i < n; ++i) {
      if (!in_slice(ids[i], vocab_begin, Vl)) continue;
      T* dst = dtable + (int64_t(ids[i]) - vocab_begin) * dim;
      const T* src = dout + i * dim;
#pragma omp simd
      for (int64_t j = d0; j < d1; ++j) dst[j] += src[j];
    }
  });
}

template <typename T>
void vocab_ce_max(const T* logits, const int32_t* targets, int64_t n, int64_t Vl, int64_t V, T* out) {
  for (int64_t i = 0; i < n; ++i)
    MT_REQUIRE(DataError, targets[i] < V, "cross_entropy: target ", targets[i], " in row ", i,
               " is outside the vocabulary [0, ", V, ")");
  parallel_range(n, n * Vl, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = targets[i] < 0 ? T(0) : row_max(logits + i * Vl, Vl);
  });
}

template <typename T>
void vocab_ce_sums(const T* logits, const int32_t* targets, int64_t n, int64_t Vl, int64_t ld, int64_t vocab_begin,
                   const T* row_max, T* sum_exp, T* target_logit, T* exps) {
  parallel_range(n, n * Vl, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T* x = logits + i * ld;
      const int32_t t = targets[i];
      if (t < 0) {
        sum_exp[i] = target_logit[i] = T(0);
        continue;
      }
      // Read before exps (which may alias the logits) overwrites the row.
      target_logit[i] = in_slice(t, vocab_begin, Vl) ? x[t - vocab_begin] : T(0);
      const T m = row_max[i];
      T s = 0;
      if (exps) {
        T* g = exps + i * ld;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < Vl; ++j) {
          const T ej = exp_t(x[j] - m);
          g[j] = ej;
          s += ej;
        }
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < Vl; ++j) s += exp_t(x[j] - m);
      }
      sum_exp[i] = s;
    }
  });
}

template <typename T>
CrossEntropyResult vocab_ce_finish(const int32_t* targets, int64_t n, int64_t Vl, int64_t vocab_begin,
                                   const T* row_max, const T* sum_exp, const T* target_logit, T grad_scale,
                                   T* dlogits) {
  std::vector<double> losses(static_cast<size_t>(n), 0.0);
  parallel_range(n, dlogits ? n * Vl : n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int32_t t = targets[i];
      T* g = dlogits ? dlogits + i * Vl : nullptr;
      if (t < 0) {
        if (g) {
#pragma omp simd
          for (int64_t j = 0; j < Vl; ++j) g[j] = T(0);
        }
        continue;
      }
      if (g) {
        const T k = grad_scale / sum_exp[i];
#pragma omp simd
        for (int64_t j = 0; j < Vl; ++j) g[j] *= k;
        if (in_slice(t, vocab_begin, Vl)) g[t - vocab_begin] -= grad_scale;
      }
      losses[size_t(i)] = double(row_max[i]) + std::log(double(sum_exp[i])) - double(target_logit[i]);
    }
  });
  CrossEntropyResult res;
  for (int64_t i = 0; i < n; ++i) {
    res.count += targets[i] >= 0;
    res.loss_sum += losses[size_t(i)];
  }
  return res;
}

#define MT_INSTANTIATE(T)                                                                                        \
  template void embedding_slice_forward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, int64_t, \
                                           T*);                                                                  \
  template void embedding_slice_backward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, T*);  \
  template void vocab_ce_max<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, T*);                        \
  template void vocab_ce_sums<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, const T*, T*, T*, T*);     \
  template CrossEntropyResult vocab_ce_finish<T>(const int32_t*, int64_t, int64_t, int64_t, const T*, const T*,  \
                                                 const T*, T, T*);
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
