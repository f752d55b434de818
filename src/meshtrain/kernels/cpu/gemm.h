// GEMM through oneDNN (runtime ISA dispatch, fp32 and bf16); f64 through a
// plain blocked loop (tests only). Row-major, contiguous operands.
//   C[M,N] = alpha * op(A) @ op(B) + beta * C
//   op(A) is [M,K]: A stored [M,K], or [K,M] when trans_a.
//   op(B) is [K,N]: B stored [K,N], or [N,K] when trans_b.
// A linear layer y = x W^T with W [out,in] is gemm(false, true, n, out, in, 1, x, W, 0, y).
// Primitives are cached per thread by shape (creation is expensive).
#pragma once

#include <cstdint>

#include "meshtrain/core/dtype.h"

namespace meshtrain::kernels {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B, T beta,
          T* C);

// bf16 inputs, f32 accumulate and output.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               const bf16* B, float beta, float* C);

}  // namespace meshtrain::kernels
