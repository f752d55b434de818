// AdamW, one fused pass over param, grad, m, v [n] (adamw.h has the update).
// Bias corrections fold into two scalars: step = lr / (1 - b1^t) and
// 1 / sqrt(1 - b2^t), as in PyTorch; the arithmetic is the header's formula.
// One loop for every level: compiled with -fno-math-errno, std::sqrt is the
// vector square root, so the loop vectorizes at the level's full width.
// Vector body and remainder run the same operations per element, so results
// do not depend on how parallel_range chunks the array (the thread count).
#include "meshtrain/kernels/cpu/adamw.h"

#include <cmath>
#include <type_traits>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

template <typename T>
void adamw_step(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWHyper& h, T grad_scale,
                uint16_t* param_bf16) {
  if constexpr (!std::is_same_v<T, float>) MT_CHECK(param_bf16 == nullptr, "adamw: a bf16 copy of f64 parameters");
  MT_CHECK(h.step >= 1, "adamw: step is 1-based, got ", h.step);
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  const T b1 = T(h.beta1), b2 = T(h.beta2), omb1 = T(1.0 - h.beta1), omb2 = T(1.0 - h.beta2);
  const T step = T(h.lr / bc1), inv_sqrt_bc2 = T(1.0 / std::sqrt(bc2)), eps = T(h.eps);
  const T lr_wd = T(h.lr * h.weight_decay);
  // One loop with or without the bf16 copy (a compile-time choice, so the
  // loop stays one vector body).
  auto update = [&](auto with_copy) {
    parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) {
        const T g = grad[i] * grad_scale;
        const T mi = b1 * m[i] + omb1 * g;
        const T vi = b2 * v[i] + omb2 * g * g;
        m[i] = mi;
        v[i] = vi;
        const T p = param[i];
        const T updated = p - step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps) - lr_wd * p;
        param[i] = updated;
        if constexpr (decltype(with_copy)::value) store_out(param_bf16 + i, updated);
      }
    });
  };
  if (param_bf16 != nullptr && std::is_same_v<T, float>)
    update(std::true_type{});
  else
    update(std::false_type{});
}

#define MT_INSTANTIATE(T) \
  template void adamw_step<T>(T*, const T*, T*, T*, int64_t, const AdamWHyper&, T, uint16_t*);
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
