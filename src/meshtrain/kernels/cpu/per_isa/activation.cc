// MLP activations over [n] contiguous elements. float uses fast_exp so the
// loops vectorize; double (gradient checks) uses libm.
#include "meshtrain/kernels/cpu/activation.h"

#include <cmath>

#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {
namespace {

inline float exp_t(float x) { return fast_exp(x); }
inline double exp_t(double x) { return std::exp(x); }

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + exp_t(-x));  // exp overflow gives exactly 0, no NaN
}

inline float tanh_t(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }
inline double tanh_t(double u) { return std::tanh(u); }

// GPT-2 gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluA = 0.044715;

}  // namespace

template <typename T, typename Out>
void swiglu_forward(const T* gate, const T* up, int64_t n, Out* out) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) store_out(out + i, gate[i] * sigmoid(gate[i]) * up[i]);
  });
}

template <typename T, typename Out>
void swiglu_backward(const T* gate, const T* up, const T* dout, int64_t n, Out* dgate, Out* dup) {
  // d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g)
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const T g = gate[i], u = up[i], d = dout[i];
      const T s = sigmoid(g);
      const T silu = g * s;
      store_out(dgate + i, d * u * (s * (T(1) + g * (T(1) - s))));
      store_out(dup + i, d * silu);
    }
  });
}

template <typename T, typename Out>
void gelu_forward(const T* x, int64_t n, Out* y) {
  const T c = T(kGeluC), a = T(kGeluA);
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const T v = x[i];
      store_out(y + i, T(0.5) * v * (T(1) + tanh_t(c * (v + a * v * v * v))));
    }
  });
}

template <typename T, typename Out>
void gelu_backward(const T* x, const T* dy, int64_t n, Out* dx) {
  const T c = T(kGeluC), a = T(kGeluA);
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const T v = x[i];
      const T t = tanh_t(c * (v + a * v * v * v));
      const T du = c * (T(1) + T(3) * a * v * v);
      store_out(dx + i, dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du));
    }
  });
}

MT_INSTANTIATE_ACTIVATIONS(float, uint16_t)
#define MT_INSTANTIATE(T) MT_INSTANTIATE_ACTIVATIONS(T, T)
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
