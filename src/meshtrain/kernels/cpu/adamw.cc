// AdamW, one fused pass over param, grad, m, v [n] (adamw.h has the update).
// Bias corrections fold into two scalars: step = lr / (1 - b1^t) and
// 1 / sqrt(1 - b2^t), as in PyTorch; the arithmetic is the header's formula.
#include "meshtrain/kernels/cpu/adamw.h"

#include <cmath>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/elementwise.h"

namespace meshtrain::kernels {
namespace {

#if defined(__AVX512F__)
// GCC keeps std::sqrt scalar under -fmath-errno (the default), so the f32
// path is written with intrinsics. Tails use masks, so every element takes
// the same instruction sequence whatever the chunking (thread count).
void adamw_f32_avx512(float* param, const float* grad, float* m, float* v, int64_t b, int64_t e, float b1f,
                      float b2f, float omb1f, float omb2f, float stepf, float inv_sqrt_bc2f, float epsf,
                      float lr_wdf, float grad_scalef) {
  const __m512 b1 = _mm512_set1_ps(b1f), b2 = _mm512_set1_ps(b2f), omb1 = _mm512_set1_ps(omb1f),
               omb2 = _mm512_set1_ps(omb2f), step = _mm512_set1_ps(stepf), inv = _mm512_set1_ps(inv_sqrt_bc2f),
               eps = _mm512_set1_ps(epsf), lr_wd = _mm512_set1_ps(lr_wdf), gs = _mm512_set1_ps(grad_scalef);
  for (int64_t i = b; i < e; i += 16) {
    const __mmask16 k = e - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (e - i)) - 1u);
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, grad + i), gs);
    const __m512 mi = _mm512_fmadd_ps(b1, _mm512_maskz_loadu_ps(k, m + i), _mm512_mul_ps(omb1, g));
    const __m512 vi = _mm512_fmadd_ps(b2, _mm512_maskz_loadu_ps(k, v + i), _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    const __m512 p = _mm512_maskz_loadu_ps(k, param + i);
    const __m512 denom = _mm512_fmadd_ps(_mm512_maskz_sqrt_ps(k, vi), inv, eps);
    const __m512 upd = _mm512_div_ps(_mm512_mul_ps(step, mi), denom);
    _mm512_mask_storeu_ps(param + i, k, _mm512_sub_ps(_mm512_sub_ps(p, upd), _mm512_mul_ps(lr_wd, p)));
  }
}
#endif

}  // namespace

template <typename T>
void adamw_step(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWHyper& h, T grad_scale) {
  MT_CHECK(h.step >= 1, "adamw: step is 1-based, got ", h.step);
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  const T b1 = T(h.beta1), b2 = T(h.beta2), omb1 = T(1.0 - h.beta1), omb2 = T(1.0 - h.beta2);
  const T step = T(h.lr / bc1), inv_sqrt_bc2 = T(1.0 / std::sqrt(bc2)), eps = T(h.eps);
  const T lr_wd = T(h.lr * h.weight_decay);
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
      adamw_f32_avx512(param, grad, m, v, b, e, b1, b2, omb1, omb2, step, inv_sqrt_bc2, eps, lr_wd, grad_scale);
      return;
    }
#endif
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const T g = grad[i] * grad_scale;
      const T mi = b1 * m[i] + omb1 * g;
      const T vi = b2 * v[i] + omb2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const T p = param[i];
      param[i] = p - step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps) - lr_wd * p;
    }
  });
}

template void adamw_step<float>(float*, const float*, float*, float*, int64_t, const AdamWHyper&, float);
template void adamw_step<double>(double*, const double*, double*, double*, int64_t, const AdamWHyper&, double);

}  // namespace meshtrain::kernels
