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

// bf16 inputs, f32 accumulate and output. Runs oneDNN's bf16 matmul where
// the CPU has one (bf16_gemm_is_native()), else gemm_bf16_widened: the same
// semantics (products of bf16 values are exact in f32, f32 accumulation).
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               const bf16* B, float beta, float* C);

// Whether oneDNN has a bf16 matmul here (e.g. avx512_core or AMX; not AVX2),
// decided once by creating one primitive descriptor, never by an exception
// in the hot path. Honours ONEDNN_MAX_CPU_ISA and MESHTRAIN_ISA (isa.h).
bool bf16_gemm_is_native();
// The fallback: widens A and B to f32 in per-thread scratch (grown once,
// reused), then the f32 GEMM.
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                       const bf16* B, float beta, float* C);

// Thread-count-invariant mode (training.reproducible, SPEC S9): the GEMMs
// this thread calls compute C in fixed blocks of rows, each whole (all of K)
// on one thread, so the bits do not depend on the OpenMP team size (oneDNN's
// own parallel GEMM may split K by team size, as its AVX2 GEMM does). Per
// calling thread: a threads-backend rank sets it for itself.
void set_thread_invariant_gemm(bool on);
bool thread_invariant_gemm();

// "oneDNN 2.6.3", for --version and run metadata.
const char* gemm_library_version();

}  // namespace meshtrain::kernels
