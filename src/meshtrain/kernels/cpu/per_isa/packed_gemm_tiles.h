// The packed GEMM's register tile (the micro-kernel) and its packing, per
// ISA level. Internal to packed_gemm.cc, which has the blocking loops.
//
// Packed layouts (k-major, so the micro-kernel reads both streams forward):
//   A block [mc x kc]: strips of kMR rows; strip s at s * kMR * kc, element
//     (row r, k) at k * kMR + r. Rows past mc are zero.
//   B block [kc x nc]: panels of kNR columns; panel p at p * kNR * kc,
//     element (k, column c) at k * kNR + c. Columns past nc are zero.
// The tile C[kMR x kNR] = alpha * sum_k a(r, k) b(k, c) + beta * C sums k in
// order from 0 on every level, one FMA per term (scalar: multiply + add), so
// an element's bits depend only on kc and its values, never on where its
// tile lies, which thread runs it or whether its A strip was packed (a
// row-major op(A) may be read in place). Padding only feeds padded outputs.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/vec.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS::packed_gemm_detail {

#if defined(MT_HAVE_VECF)
// Rows x vectors of accumulators, plus kNV B vectors and one broadcast, fill
// the register file: AVX-512 12 x 2 zmm (24 + 3 of 32), AVX2 6 x 2 ymm
// (12 + 3 of 16). Per k: kMR broadcasts + kNV loads for kMR * kNV FMAs.
inline constexpr int kMR = kLanes == 16 ? 12 : 6;
inline constexpr int kNV = 2;
inline constexpr int kNR = kNV * kLanes;
// k per block: an A strip (kMR x kKC, 24 KiB on AVX-512, 6 KiB on AVX2)
// stays in half of L1 while B panels stream past it. The only blocking size
// that shapes an element's sum (so its bits).
inline constexpr int64_t kKC = kLanes == 16 ? 512 : 256;
#else
inline constexpr int kMR = 4;
inline constexpr int kNR = 8;
inline constexpr int64_t kKC = 256;
#endif
// Below this many multiply-adds one thread does it all (a fork/join and
// shared packing cost more than they save).
inline constexpr double kParallelMinMacs = 1 << 21;

// Whether rows of a row-major op(A) lda elements of In apart may be read in
// place by a tile: not a multiple of 4 KiB apart, where a strip's rows
// would all fall in the same L1 sets.
template <typename In>
inline bool rows_apart_for_in_place(int64_t lda) {
  return lda % (4096 / int64_t(sizeof(In))) != 0;
}

// This core's L2 in bytes (256 KiB where the system does not say).
inline int64_t l2_bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? int64_t(l2) : int64_t(256) << 10;
  }();
  return bytes;
}

// Rows of a row-major operand a copying pack reads at a time (each once, in
// order, across all strips or panels).
inline constexpr int64_t kKBlock = 16;
// Floats a pack may write past its block (the vector stores overlap forward).
inline constexpr int64_t kPackSlack = 64;

#if defined(MT_HAVE_VECF)
inline VecF zeros() { return VecF{}; }
// The first n lanes from p (n <= 0: zeros; n >= kLanes: a full load). Reads
// nothing past them, so a tail at the end of a matrix never leaves it.
inline VecF load_first(const float* p, int64_t n) {
  if (n >= kLanes) return load(p);
  return n <= 0 ? zeros() : load(p, tail_of(int(n)));
}

// The B panel streams from L2: fetched this many k steps ahead.
inline constexpr int64_t kPrefetchK = 16;

// C[kMR x kNR] (ldc) = alpha * acc + beta * C_in (beta == 0 never reads C_in).
inline void store_tile(const VecF (&acc)[kMR][kNV], float* c, int64_t ldc, float alpha, float beta,
                       const float* c_in) {
  const VecF va = broadcast(alpha), vb = broadcast(beta);
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) {
      const int64_t at = r * ldc + v * kLanes;
      store(c + at, beta == 0.0f ? acc[r][v] * va : fmadd(va, acc[r][v], vb * load(c_in + at)));
    }
}

// C[kMR x kNR] (ldc) = alpha * op + beta * C_in (C_in: C itself, or the
// rows of another matrix with the same ldc); beta == 0 never reads C_in.
// The A strip is packed (a), or with kInPlaceA the kMR rows of a row-major
// op(A) at a, lda apart: the same values in the same order either way.
// Not inlined: on its own the k loop keeps all accumulators and both B
// vectors in registers (inlined into the edge handling, GCC spilled one).
template <bool kInPlaceA>
[[gnu::noinline]] inline void tile(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b, float* c,
                                   int64_t ldc, float alpha, float beta, const float* c_in) {
  VecF acc[kMR][kNV];
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = zeros();
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    VecF bv[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) {
      __builtin_prefetch(b + kPrefetchK * kNR + v * kLanes, 0, 3);
      bv[v] = load(b + v * kLanes);
    }
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      const VecF ar = broadcast(kInPlaceA ? a[r * lda] : a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[r][v] = fmadd(ar, bv[v], acc[r][v]);
    }
    a += kInPlaceA ? 1 : kMR;
    b += kNR;
  }
  store_tile(acc, c, ldc, alpha, beta, c_in);
}

// Entries [used, ld) of rows 0 .. k - 1 of a packed strip or panel (row
// length ld): the padding past the matrix's edge is zero.
inline void zero_padding(float* out, int64_t ld, int64_t used, int64_t k) {
  if (used < ld)
    for (int64_t i = 0; i < k; ++i) std::fill(out + i * ld + used, out + (i + 1) * ld, 0.0f);
}

// A block rows [0, m) x k [0, kc) of op(A), op(A)(i, k) = a[i * rs + k * cs]
// with (rs, cs) = (lda, 1), or (1, lda) for a transposed A.
inline void pack_a(const float* a, int64_t lda, bool trans, int64_t m, int64_t kc, float* out) {
  const int64_t strips = (m + kMR - 1) / kMR;
  if (trans) {  // a strip's values of one k are contiguous: rows of A read in order, kKBlock at a time
    for (int64_t k0 = 0; k0 < kc; k0 += kKBlock)
      for (int64_t s = 0; s < strips; ++s) {
        const int64_t k1 = std::min(kc, k0 + kKBlock), rows = std::min<int64_t>(kMR, m - s * kMR);
        float* dst = out + s * kMR * kc;
        for (int64_t k = k0; k < k1; ++k) {
          const VecF v = load_first(a + k * lda + s * kMR, rows);
          if (k + 1 < kc) store(dst + k * kMR, v);  // overlaps the next k's slot, written next
          else store(dst + k * kMR, v, tail_of(kMR));  // the strip's end: the next strip is written already
        }
      }
    return;
  }
  for (int64_t s = 0; s < strips; ++s, out += kMR * kc) {  // register transposes (vec.h)
    const int64_t rows = std::min<int64_t>(kMR, m - s * kMR);
    transpose_block(a + s * kMR * lda, lda, int(rows), int(kc), out, kMR);
    zero_padding(out, kMR, rows, kc);
  }
}

// Panels [p0, p1) of a B block k [0, kc) x columns [0, n) of op(B),
// op(B)(k, j) = b[k * ldb + j], or b[j * ldb + k] for a transposed B.
inline void pack_b(const float* b, int64_t ldb, bool trans, int64_t kc, int64_t n, int64_t p0, int64_t p1,
                   float* out) {
  if (!trans) {  // a panel's values of one k are contiguous: rows of B read in order, kKBlock at a time
    for (int64_t k0 = 0; k0 < kc; k0 += kKBlock)
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t k = k0; k < std::min(kc, k0 + kKBlock); ++k)
#pragma GCC unroll 4
          for (int v = 0; v < kNV; ++v) {
            const int64_t j = p * kNR + v * kLanes;
            store(out + p * kNR * kc + k * kNR + v * kLanes, load_first(b + k * ldb + j, n - j));
          }
    return;
  }
  for (int64_t p = p0; p < p1; ++p) {  // register transposes (vec.h)
    const int64_t cols = std::min<int64_t>(kNR, n - p * kNR);
    transpose_block(b + p * kNR * ldb, ldb, int(cols), int(kc), out + p * kNR * kc, kNR);
    zero_padding(out + p * kNR * kc, kNR, cols, kc);
  }
}

#else  // scalar level: the same layouts and sums in plain loops

template <bool kInPlaceA>
inline void tile(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b, float* c, int64_t ldc,
                 float alpha, float beta, const float* c_in) {
  float acc[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k, a += kInPlaceA ? 1 : kMR, b += kNR)
    for (int r = 0; r < kMR; ++r)
      for (int j = 0; j < kNR; ++j) acc[r][j] += (kInPlaceA ? a[r * lda] : a[r]) * b[j];
  for (int r = 0; r < kMR; ++r)
    for (int j = 0; j < kNR; ++j) {
      const int64_t at = r * ldc + j;
      c[at] = beta == 0.0f ? alpha * acc[r][j] : alpha * acc[r][j] + beta * c_in[at];
    }
}

inline void pack_a(const float* a, int64_t lda, bool trans, int64_t m, int64_t kc, float* out) {
  for (int64_t s = 0; s * kMR < m; ++s, out += kMR * kc)
    for (int64_t k = 0; k < kc; ++k)
      for (int r = 0; r < kMR; ++r) {
        const int64_t i = s * kMR + r;
        out[k * kMR + r] = i < m ? (trans ? a[k * lda + i] : a[i * lda + k]) : 0.0f;
      }
}

inline void pack_b(const float* b, int64_t ldb, bool trans, int64_t kc, int64_t n, int64_t p0, int64_t p1,
                   float* out) {
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t k = 0; k < kc; ++k)
      for (int c = 0; c < kNR; ++c) {
        const int64_t j = p * kNR + c;
        out[p * kNR * kc + k * kNR + c] = j < n ? (trans ? b[j * ldb + k] : b[k * ldb + j]) : 0.0f;
      }
}
#endif

}  // namespace meshtrain::kernels::MT_ISA_NS::packed_gemm_detail
MT_ISA_END
