// RMSNorm and LayerNorm over the last dim. x, y, dy, dx [n, d]; w, b [d];
// saved statistics [n]. Backward ACCUMULATES into dx (norms sit on the
// residual stream, whose gradient is already there) and into dw, db.
// The forward's Out is T, or uint16_t for bf16 bits of an f32 y (the bf16
// policy's matmul operand written directly, as activation.h's).
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

// y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps)
template <typename T, typename Out>
void rmsnorm_forward(const T* x, const T* w, int64_t n, int64_t d, T eps, Out* y, T* rstd);
template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t d, T* dx, T* dw);

// y = (x - mean) * rstd * w + b
template <typename T, typename Out>
void layernorm_forward(const T* x, const T* w, const T* b, int64_t n, int64_t d, T eps, Out* y, T* mean, T* rstd);
template <typename T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n, int64_t d,
                        T* dx, T* dw, T* db);

}  // namespace meshtrain::kernels
