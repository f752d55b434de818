#include "meshtrain/model/layers.h"

#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/norm.h"

namespace meshtrain::model {

template <typename T>
void Linear<T>::forward(const T* x, int64_t n, T* y, bool accumulate_y) const {
  kernels::gemm<T>(false, true, n, out, in, T(1), x, weight->value.template data<T>(), accumulate_y ? T(1) : T(0), y);
  if (bias) {
    const T* b = bias->value.template data<T>();
    for (int64_t i = 0; i < n; ++i) {
      T* row = y + i * out;
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] += b[j];
    }
  }
}

template <typename T>
void Linear<T>::backward(const T* x, const T* dy, int64_t n, T* dx, bool accumulate_dx) const {
  kernels::gemm<T>(true, false, out, in, n, T(1), dy, x, T(1), weight->grad.template data<T>());
  if (bias) {
    T* db = bias->grad.template data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const T* row = dy + i * out;
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) db[j] += row[j];
    }
  }
  if (dx)
    kernels::gemm<T>(false, false, n, in, out, T(1), dy, weight->value.template data<T>(),
                     accumulate_dx ? T(1) : T(0), dx);
}

template <typename T>
void Norm<T>::forward(const T* x, int64_t n, T* y, T* mean, T* rstd) const {
  const T* w = weight->value.template data<T>();
  if (kind == NormKind::RMSNorm) {
    kernels::rmsnorm_forward<T>(x, w, n, d, eps, y, rstd);
  } else {
    kernels::layernorm_forward<T>(x, w, bias->value.template data<T>(), n, d, eps, y, mean, rstd);
  }
}

template <typename T>
void Norm<T>::backward(const T* x, const T* mean, const T* rstd, const T* dy, int64_t n, T* dx) const {
  const T* w = weight->value.template data<T>();
  T* dw = weight->grad.template data<T>();
  if (kind == NormKind::RMSNorm) {
    kernels::rmsnorm_backward<T>(x, w, rstd, dy, n, d, dx, dw);
  } else {
    kernels::layernorm_backward<T>(x, w, mean, rstd, dy, n, d, dx, dw, bias->grad.template data<T>());
  }
}

template struct Linear<float>;
template struct Linear<double>;
template struct Norm<float>;
template struct Norm<double>;

}  // namespace meshtrain::model
