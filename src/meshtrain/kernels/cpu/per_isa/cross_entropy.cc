// Cross-entropy over logits [n, V], targets [n] (target < 0: unsupervised).
// Per row: loss = logsumexp(x) - x[target], with the max subtracted first.
// The loss SUM is accumulated in double in row order whatever the thread
// count (row losses go to a stack buffer, then are added serially).
#include "meshtrain/kernels/cpu/cross_entropy.h"

#include <cmath>
#include <limits>

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

void check_targets(const int32_t* targets, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    MT_REQUIRE(DataError, targets[i] < V, "cross_entropy: target ", targets[i], " in row ", i,
               " is outside the vocabulary [0, ", V, ")");
}

// Rows are processed in chunks whose losses fit a stack buffer; `row_fn(i)`
// returns row i's loss (0 for an unsupervised row).
template <typename RowFn>
double sum_rows(int64_t n, int64_t V, RowFn&& row_fn) {
  constexpr int64_t kChunk = 1024;
  double losses[kChunk];
  double total = 0;
  for (int64_t base = 0; base < n; base += kChunk) {
    const int64_t len = std::min(kChunk, n - base);
    parallel_range(len, len * V, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) losses[r] = row_fn(base + r);
    });
    for (int64_t r = 0; r < len; ++r) total += losses[r];
  }
  return total;
}

int64_t count_supervised(const int32_t* targets, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += targets[i] >= 0;
  return c;
}

}  // namespace

template <typename T>
CrossEntropyResult cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t V) {
  check_targets(targets, n, V);
  CrossEntropyResult res;
  res.count = count_supervised(targets, n);
  res.loss_sum = sum_rows(n, V, [&](int64_t i) -> double {
    if (targets[i] < 0) return 0.0;
    const T* x = logits + i * V;
    const T m = row_max(x, V);
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < V; ++j) s += exp_t(x[j] - m);
    return double(m) + std::log(double(s)) - double(x[targets[i]]);
  });
  return res;
}

template <typename T>
CrossEntropyResult cross_entropy_forward_backward(const T* logits, const int32_t* targets, int64_t n, int64_t V,
                                                  T grad_scale, T* dlogits) {
  check_targets(targets, n, V);
  CrossEntropyResult res;
  res.count = count_supervised(targets, n);
  // dlogits = grad_scale (softmax - onehot). The row stays in cache across
  // the three sweeps (max, exp + sum, scale), so memory sees one read and one
  // write per element. dlogits may alias logits: x[target] is read first.
  res.loss_sum = sum_rows(n, V, [&](int64_t i) -> double {
    const T* x = logits + i * V;
    T* g = dlogits + i * V;
    const int32_t t = targets[i];
    if (t < 0) {
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) g[j] = T(0);
      return 0.0;
    }
    const T xt = x[t];
    const T m = row_max(x, V);
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < V; ++j) {
      const T e = exp_t(x[j] - m);
      g[j] = e;
      s += e;
    }
    const T k = grad_scale / s;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) g[j] *= k;
    g[t] -= grad_scale;
    return double(m) + std::log(double(s)) - double(xt);
  });
  return res;
}

#define MT_INSTANTIATE(T)                                                                                    \
  template CrossEntropyResult cross_entropy_forward<T>(const T*, const int32_t*, int64_t, int64_t);         \
  template CrossEntropyResult cross_entropy_forward_backward<T>(const T*, const int32_t*, int64_t, int64_t, \
                                                                T, T*);
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
