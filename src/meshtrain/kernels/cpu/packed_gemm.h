// The project's own f32 GEMM (and its bf16 twin, below), for the shapes of
// a training step: op(B) and op(A) packed into cache-sized blocks (a
// row-major op(A) of one column block is read in place), a register-blocked
// tile per ISA level (AVX-512 12 x 32, AVX2 6 x 16, plain loops at the
// scalar level), threads over rows of C. Same contract as gemm.h (row-major, transposes, alpha, beta; beta ==
// 0 never reads C). Its bits do not depend on the thread count nor on how
// the operands are stored: each element is summed over k in fixed blocks of
// kc in order.
// gemm<float> runs it at the avx2 and avx512 levels unless MESHTRAIN_GEMM
// says otherwise (gemm.h).
#pragma once

#include <cstdint>

#include "meshtrain/core/dtype.h"

namespace meshtrain::kernels {

struct PackedGemmBlocking {
  int64_t mr, nr;  // register tile: rows x columns of C
  int64_t kc, nc;  // packed blocks: A [rows x kc], B [kc x nc] (nc: half the L2)
  int64_t nc_whole;  // an op(B) up to this many columns is one block (kc x nc_whole: the L2)
};

// At the active ISA level (isa.h).
void packed_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     const float* B, float beta, float* C);

// Row sets that share op(B): C_i[M_i, N] = alpha op(A_i) op(B) + beta_i C_i,
// op(A_i) [M_i, K]. Each packed block of op(B) serves every set before the
// next is packed (the weight gradients of layers that read one input: one
// pass over it instead of one per layer); each C_i gets the bits
// packed_gemm_f32 gives it alone.
template <typename In>
struct PackedGemmRowsOf {
  int64_t M = 0;
  const In* A = nullptr;
  float beta = 0.0f;
  float* C = nullptr;
  // What beta multiplies, when not C itself: C = alpha op(A) op(B) + beta
  // C_in (a residual added inside the GEMM instead of copied first).
  const float* C_in = nullptr;
};
using PackedGemmRows = PackedGemmRowsOf<float>;
void packed_gemm_f32_rows(bool trans_a, bool trans_b, const PackedGemmRows* rows, int count, int64_t N, int64_t K,
                          float alpha, const float* B);
PackedGemmBlocking packed_gemm_blocking();

// A sum over blocks of k in a binary tree (docs/math.md (M.73), (M.74)):
//   C (+)= the tree over leaves j = 0 .. leaves - 1 of
//          leaf j = sum over terms t, in order, of op(A_t)[:, K_tj] op(B_t)[K_tj, :]
// with K_tj = [k_offsets[j], + k_lengths[j]) of term t (lengths > 0), each
// leaf's first product written (beta 0) and the later ones added (beta 1),
// the leaves added as model/canonical_sum.h's BlockTree adds them (equal
// levels at once, left += right; the subtrees still apart right to left),
// and the root added to C where `accumulate` (C + root), else written.
// Each element gets the bits of those separate packed_gemm_f32 calls (on
// the blocks' columns and rows) and of the tree's additions in memory, for
// any team size; here the leaves of a few kMR strips of rows live in L2
// while their blocks are summed, instead of each leaf passing through
// memory. op(A_t) [M, K_t], op(B_t) [K_t, N], row-major with lda, ldb.
struct PackedGemmTreeTerm {
  const float* A = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const float* B = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  const int64_t* k_offsets = nullptr;  // [leaves]
  const int64_t* k_lengths = nullptr;  // [leaves]
};
void packed_gemm_f32_tree(const PackedGemmTreeTerm* terms, int count, int leaves, int64_t M, int64_t N,
                          bool accumulate, float* C);

// The same GEMM on bf16 operands, f32 accumulate and output, where the CPU
// has AVX-512 BF16 (packed_gemm_bf16_available()): the same loops and
// layouts with k in pairs, a VDPBF16PS tile (per pair of k: c += a(k+1)
// b(k+1), then c += a(k) b(k), each rounded once; products of bf16 values
// are exact in f32; the instruction reads bf16 denormals as zero and
// flushes denormal results, as oneDNN's bf16 GEMM on the same CPU does).
// Bits do not depend on the thread count nor on how the operands are
// stored. Odd K pads the last pair with zero.
bool packed_gemm_bf16_available();
using PackedGemmRowsBf16 = PackedGemmRowsOf<bf16>;
void packed_gemm_bf16_rows(bool trans_a, bool trans_b, const PackedGemmRowsBf16* rows, int count, int64_t N, int64_t K,
                           float alpha, const bf16* B);
PackedGemmBlocking packed_gemm_bf16_blocking();

}  // namespace meshtrain::kernels
