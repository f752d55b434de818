// AdamW with decoupled weight decay and bias correction, fused in one pass:
//   g = grad * grad_scale            (grad_scale: clip coefficient)
//   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

struct AdamWHyper {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;  // 1-based update count, for bias correction
};

// param_bf16, where not null, also receives the updated param's bf16 bits
// (the 16-bit compute copy of an f32 master, as convert_f32_to_bf16 would
// round it, in the same pass).
template <typename T>
void adamw_step(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWHyper& h, T grad_scale,
                uint16_t* param_bf16 = nullptr);

}  // namespace meshtrain::kernels
