// GEMM: f32 through the project's packed GEMM (packed_gemm.h) or oneDNN
// (GemmImpl below), bf16 through oneDNN (runtime ISA dispatch); f64 through a
// plain blocked loop (tests only). Row-major, contiguous operands.
//   C[M,N] = alpha * op(A) @ op(B) + beta * C
//   op(A) is [M,K]: A stored [M,K], or [K,M] when trans_a.
//   op(B) is [K,N]: B stored [K,N], or [N,K] when trans_b.
// A linear layer y = x W^T with W [out,in] is gemm(false, true, n, out, in, 1, x, W, 0, y).
// oneDNN primitives are cached per thread by shape (creation is expensive).
#pragma once

#include <cstdint>
#include <string>

#include "meshtrain/core/dtype.h"
#include "meshtrain/kernels/cpu/packed_gemm.h"

namespace meshtrain::kernels {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B, T beta,
          T* C);

// The f32 GEMM that gemm<float> runs (so also gemm_f16 and the widened bf16
// fallback, which widen and call it):
//   packed  packed_gemm.h, the default at the avx2 and avx512 levels
//   onednn  oneDNN's matmul, the default at the scalar level
// MESHTRAIN_GEMM=packed|onednn chooses one at every level (comparisons);
// onednn also turns the packed bf16 GEMM off (bf16_gemm_is_packed).
enum class GemmImpl : int { kOnednn = 0, kPacked = 1 };
GemmImpl active_gemm_impl();
const char* gemm_impl_name(GemmImpl impl);  // "onednn" | "packed"
// What MESHTRAIN_GEMM=`request` means at ISA level `isa_level` (isa.h's Isa
// as an int): nullptr or "" -> the level's default; an unknown name ->
// ConfigError naming the variable and the choices.
GemmImpl resolve_gemm_request(const char* request, int isa_level);
// gemm<float> through `impl`, whichever is active (benchmarks, tests).
void gemm_f32_using(GemmImpl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, const float* B, float beta, float* C);
// Products that share op(B) (PackedGemmRowsOf, packed_gemm.h), In float or
// bf16, each as gemm<float> / gemm_bf16 would compute it alone: the packed
// GEMM packs op(B) once for all of them, the others run them one by one.
template <typename In>
void gemm_shared_b(bool trans_a, bool trans_b, const PackedGemmRowsOf<In>* rows, int count, int64_t N, int64_t K,
                   float alpha, const In* B);
// C = alpha op(A) op(B) + C_in (C_in [M,N], C itself or apart): the same
// bits as copying C_in into C and then a GEMM with beta 1; the packed GEMM
// reads C_in in its first k block instead of a copy first.
template <typename In>
void gemm_onto(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const In* A, const In* B,
               const float* C_in, float* C);
// What decides the GEMMs' bits here besides the ISA level: the f32 GEMM with
// its blocking, the packed bf16 GEMM's where it runs, and the oneDNN
// version, e.g. "packed 12x32 kc 512 + bf16 packed kc 1024 +
// oneDNN 2.6.3". For --version, bench headers and checkpoints' kernel
// environment (a different value: no bitwise replay claim).
std::string gemm_description();

// bf16 inputs, f32 accumulate and output. Runs the packed bf16 GEMM where
// bf16_gemm_is_packed(), else oneDNN's bf16 matmul where the CPU has one
// (bf16_gemm_is_native()), else gemm_bf16_widened: the same semantics
// (products of bf16 values are exact in f32, f32 accumulation; the order
// of the sums, so the last bits, differ between the three).
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               const bf16* B, float beta, float* C);
// gemm_bf16 through `impl`: packed where packed_gemm_bf16_available(), else
// oneDNN's bf16 matmul where native, else widened (benchmarks, tests).
void gemm_bf16_using(GemmImpl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const bf16* A, const bf16* B, float beta, float* C);
// Whether gemm_bf16 runs the packed GEMM: the CPU has AVX-512 BF16 at the
// avx512 level (packed_gemm_bf16_available()), MESHTRAIN_GEMM leaves the
// packed GEMMs on, and there is no AMX (where oneDNN's bf16 kernels use it
// and are faster) or this thread is in reproducible mode
// (thread_invariant_gemm(): oneDNN's AMX sums follow the shape, which the
// layouts split). The second form answers for a given mode.
bool bf16_gemm_is_packed();
bool bf16_gemm_is_packed(bool reproducible);
const char* bf16_gemm_name();  // "packed" | "onednn" | "widened"

// Whether oneDNN has a bf16 matmul here (e.g. avx512_core or AMX; not AVX2),
// decided once by creating one primitive descriptor, never by an exception
// in the hot path. Honours ONEDNN_MAX_CPU_ISA and MESHTRAIN_ISA (isa.h).
bool bf16_gemm_is_native();
// The fallback: widens A and B to f32 in per-thread scratch (grown once,
// reused), then the f32 GEMM.
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                       const bf16* B, float beta, float* C);

// Thread-count-invariant mode (training.reproducible, docs/math.md, "Reproducible
// mode: the fixed summation tree"): the oneDNN GEMMs this thread calls compute C
// in fixed blocks of rows, each whole (all of K) on one thread, so the bits do
// not depend on the OpenMP team size (oneDNN's own parallel GEMM may split K by
// team size, as its AVX2 GEMM does). The packed GEMM is invariant by construction
// and ignores it. Per calling thread: a threads-backend rank sets it for itself.
void set_thread_invariant_gemm(bool on);
bool thread_invariant_gemm();
// The mode for a scope (a step, an evaluation pass), the caller's restored after.
class ScopedThreadInvariantGemm {
 public:
  explicit ScopedThreadInvariantGemm(bool on) : saved_(thread_invariant_gemm()) { set_thread_invariant_gemm(on); }
  ~ScopedThreadInvariantGemm() { set_thread_invariant_gemm(saved_); }
  ScopedThreadInvariantGemm(const ScopedThreadInvariantGemm&) = delete;
  ScopedThreadInvariantGemm& operator=(const ScopedThreadInvariantGemm&) = delete;

 private:
  bool saved_;
};

// "oneDNN 2.6.3", for --version and run metadata.
const char* gemm_library_version();

}  // namespace meshtrain::kernels
