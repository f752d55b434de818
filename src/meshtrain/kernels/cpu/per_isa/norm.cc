// RMSNorm and LayerNorm over the last dim. x, y, dy, dx [n, d]; w, b [d];
// mean, rstd [n]. Row statistics accumulate in double. Backward: dx rows in
// parallel over rows; dw / db in a second pass parallel over columns, each
// column summed in row order, so results do not depend on the thread count.
#include "meshtrain/kernels/cpu/norm.h"

#include <cmath>

#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

template <typename T>
void rmsnorm_forward(const T* x, const T* w, int64_t n, int64_t d, T eps, T* y, T* rstd) {
  parallel_range(n, n * d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * d;
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < d; ++j) ss += double(xr[j]) * double(xr[j]);
      const T r = T(1.0 / std::sqrt(ss / double(d) + double(eps)));
      rstd[i] = r;
      T* yr = y + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * r * w[j];
    }
  });
}

template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t d, T* dx, T* dw) {
  // dx = r w dy - (r^3 / d) x sum_k(w_k dy_k x_k)
  parallel_range(n, n * d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      double dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < d; ++j) dot += double(w[j]) * double(dyr[j]) * double(xr[j]);
      const double r = double(rstd[i]);
      const T coef = T(r * r * r * dot / double(d));
      const T rt = rstd[i];
      T* dxr = dx + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dxr[j] += rt * w[j] * dyr[j] - coef * xr[j];
    }
  });
  parallel_range(d, n * d, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      const T r = rstd[i];
#pragma omp simd
      for (int64_t j = c0; j < c1; ++j) dw[j] += dyr[j] * xr[j] * r;
    }
  });
}

template <typename T>
void layernorm_forward(const T* x, const T* w, const T* b, int64_t n, int64_t d, T eps, T* y, T* mean, T* rstd) {
  parallel_range(n, n * d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * d;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < d; ++j) s += double(xr[j]);
      const double mu = s / double(d);
      double var = 0;  // two-pass: no cancellation for large means
#pragma omp simd reduction(+ : var)
      for (int64_t j = 0; j < d; ++j) var += (double(xr[j]) - mu) * (double(xr[j]) - mu);
      const T m = T(mu), r = T(1.0 / std::sqrt(var / double(d) + double(eps)));
      mean[i] = m;
      rstd[i] = r;
      T* yr = y + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * r * w[j] + b[j];
    }
  });
}

template <typename T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n, int64_t d,
                        T* dx, T* dw, T* db) {
  // xhat = (x - mean) r, g = w dy: dx = r (g - mean(g) - xhat mean(g xhat))
  parallel_range(n, n * d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      const T m = mean[i], r = rstd[i];
      double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
      for (int64_t j = 0; j < d; ++j) {
        const double g = double(w[j]) * double(dyr[j]);
        sg += g;
        sgx += g * double((xr[j] - m) * r);
      }
      const T mg = T(sg / double(d)), mgx = T(sgx / double(d));
      T* dxr = dx + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        const T xhat = (xr[j] - m) * r;
        dxr[j] += r * (w[j] * dyr[j] - mg - xhat * mgx);
      }
    }
  });
  parallel_range(d, n * d, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      const T m = mean[i], r = rstd[i];
#pragma omp simd
      for (int64_t j = c0; j < c1; ++j) {
        dw[j] += dyr[j] * ((xr[j] - m) * r);
        db[j] += dyr[j];
      }
    }
  });
}

#define MT_INSTANTIATE(T)                                                                                   \
  template void rmsnorm_forward<T>(const T*, const T*, int64_t, int64_t, T, T*, T*);                     \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*);   \
  template void layernorm_forward<T>(const T*, const T*, const T*, int64_t, int64_t, T, T*, T*, T*);     \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                      T*, T*, T*);
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
