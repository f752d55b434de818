// The bf16 packed GEMM's register tile and packing (AVX-512 level; the tile
// also needs AVX-512 BF16, which the caller checks). Internal to
// packed_gemm.cc, which runs them in the f32 GEMM's loops.
//
// Layouts: those of packed_gemm_tiles.h with k in pairs, so one 32-bit lane
// holds (k, k + 1) as VDPBF16PS reads it:
//   A strip: element (row r, k) at (k / 2 * kMR + r) * 2 + k % 2;
//   B panel: element (k, column c) at (k / 2 * kNR + c) * 2 + k % 2.
// kc is padded to even (pairs_of): the pad, like rows or columns past the
// matrix, is zero. A row-major op(A) read in place broadcasts (k, k + 1)
// straight from its rows, so K must be even there (the caller packs
// otherwise). Per pair the tile adds a(k+1) b(k+1), then a(k) b(k) (the
// instruction's order; products of bf16 values are exact in f32), k in
// order from 0: bits depend only on kc and the values, as in f32.
#pragma once

#include <cstdint>
#include <cstring>

#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/packed_gemm_tiles.h"
#include "meshtrain/kernels/cpu/per_isa/vec.h"

#if MT_KERNEL_ISA == MT_ISA_AVX512
MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS::packed_gemm_detail {

// k per block: an A strip (kMR x kKCBf16 bf16, 24 KiB) stays in half of L1,
// as the f32 strip does. Shapes an element's sum, as kKC does in f32.
inline constexpr int64_t kKCBf16 = 1024;

inline int64_t even_up(int64_t k) { return (k + 1) / 2 * 2; }

template <bool kInPlaceA>
[[gnu::noinline, gnu::target("avx512bf16")]] inline void tile_bf16(int64_t kc, const uint16_t* __restrict a,
                                                                   int64_t lda, const uint16_t* __restrict b,
                                                                   float* c, int64_t ldc, float alpha, float beta,
                                                                   const float* c_in) {
  VecF acc[kMR][kNV];
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = zeros();
  const int64_t pairs = (kc + 1) / 2;
#pragma GCC unroll 2
  for (int64_t kp = 0; kp < pairs; ++kp) {
    __m512i bv[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) {
      __builtin_prefetch(b + 2 * (kPrefetchK * kNR + v * kLanes), 0, 3);
      bv[v] = _mm512_loadu_si512(b + 2 * v * kLanes);
    }
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      int32_t pair;
      std::memcpy(&pair, kInPlaceA ? a + r * lda : a + 2 * r, sizeof(pair));
      const __m512i ar = _mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], __m512bh(ar), __m512bh(bv[v]));
    }
    a += kInPlaceA ? 2 : 2 * kMR;
    b += 2 * kNR;
  }
  store_tile(acc, c, ldc, alpha, beta, c_in);
}

// (x[f], y[f], x[f + 1], y[f + 1], ...) for lanes f .. f + 15 of x and y,
// f = 16 half (permutex2var indices: 0-31 pick x, 32-63 pick y).
inline __m512i interleave16(__m512i x, __m512i y, int half) {
  static constexpr auto kIndex = [] {
    struct Table {
      alignas(64) int16_t at[2][32];
    } t{};
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 16; ++i) t.at[h][2 * i] = int16_t(16 * h + i), t.at[h][2 * i + 1] = int16_t(32 + 16 * h + i);
    return t;
  }();
  return _mm512_permutex2var_epi16(x, _mm512_load_si512(kIndex.at[half]), y);
}

inline __mmask32 first16(int64_t n) { return n >= 32 ? ~__mmask32(0) : n <= 0 ? 0 : (__mmask32(1) << n) - 1; }

// Pairs of rows k, k + 1 (k + 1 < kc, else zeros) of a row-major matrix,
// `cols` (<= 32) values each, interleaved into out[0 .. 2 * width): the
// packing of k-major operands (a row-major op(B), a transposed op(A)).
inline void interleave_rows(const uint16_t* row, int64_t ld, int64_t k, int64_t kc, int64_t cols, int width,
                            uint16_t* out) {
  const __mmask32 m = first16(cols);
  const __m512i x = _mm512_maskz_loadu_epi16(m, row);
  const __m512i y = k + 1 < kc ? _mm512_maskz_loadu_epi16(m, row + ld) : _mm512_setzero_si512();
  const __m512i lo = interleave16(x, y, 0);
  if (width <= 16) {
    _mm512_mask_storeu_epi16(out, first16(2 * width), lo);
    return;
  }
  _mm512_storeu_si512(out, lo);
  _mm512_mask_storeu_epi16(out + 32, first16(2 * (width - 16)), interleave16(x, y, 1));
}

// Any layout, any parity, one element at a time: out (width rows or columns
// by even_up(kc)) from at(i, k) for i < used, zero elsewhere.
template <typename At>
inline void pack_pairs_plain(At at, int64_t used, int width, int64_t kc, uint16_t* out) {
  for (int64_t k = 0; k < even_up(kc); ++k)
    for (int i = 0; i < width; ++i) out[(k / 2 * width + i) * 2 + k % 2] = i < used && k < kc ? at(i, k) : 0;
}

// Dword transposes (vec.h's float transpose moves bits unchanged): `lines`
// rows of a row-major operand, each kc values (kc and ld even) -> pairs.
inline void transpose_pairs(const uint16_t* src, int64_t ld, int64_t lines, int64_t kc, int width, uint16_t* out) {
  transpose_block(reinterpret_cast<const float*>(src), ld / 2, int(lines), int(kc / 2), reinterpret_cast<float*>(out),
                  width);
  zero_padding(reinterpret_cast<float*>(out), width, lines, kc / 2);
}

// A block rows [0, m) x k [0, kc) of op(A), as pack_a (packed_gemm_tiles.h).
inline void pack_a_bf16(const uint16_t* a, int64_t lda, bool trans, int64_t m, int64_t kc, uint16_t* out) {
  const int64_t strips = (m + kMR - 1) / kMR, strip_size = kMR * even_up(kc);
  if (trans) {  // k-major: pairs of A's rows interleaved, kKBlock rows at a time across the strips
    for (int64_t k0 = 0; k0 < kc; k0 += kKBlock)
      for (int64_t s = 0; s < strips; ++s)
        for (int64_t k = k0; k < std::min(kc, k0 + kKBlock); k += 2)
          interleave_rows(a + k * lda + s * kMR, lda, k, kc, std::min<int64_t>(kMR, m - s * kMR), kMR,
                          out + s * strip_size + k * kMR);
    return;
  }
  for (int64_t s = 0; s < strips; ++s, out += strip_size) {
    const int64_t rows = std::min<int64_t>(kMR, m - s * kMR);
    if (kc % 2 == 0 && lda % 2 == 0) {
      transpose_pairs(a + s * kMR * lda, lda, rows, kc, kMR, out);
    } else {
      const uint16_t* base = a + s * kMR * lda;
      pack_pairs_plain([&](int64_t i, int64_t k) { return base[i * lda + k]; }, rows, kMR, kc, out);
    }
  }
}

// Panels [p0, p1) of a B block k [0, kc) x columns [0, n) of op(B), as pack_b.
inline void pack_b_bf16(const uint16_t* b, int64_t ldb, bool trans, int64_t kc, int64_t n, int64_t p0, int64_t p1,
                        uint16_t* out) {
  const int64_t panel_size = kNR * even_up(kc);
  if (!trans) {  // k-major: pairs of B's rows interleaved, kKBlock rows at a time across the panels
    for (int64_t k0 = 0; k0 < kc; k0 += kKBlock)
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t k = k0; k < std::min(kc, k0 + kKBlock); k += 2)
          interleave_rows(b + k * ldb + p * kNR, ldb, k, kc, n - p * kNR, kNR, out + p * panel_size + k * kNR);
    return;
  }
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t cols = std::min<int64_t>(kNR, n - p * kNR);
    const uint16_t* base = b + p * kNR * ldb;
    if (kc % 2 == 0 && ldb % 2 == 0)
      transpose_pairs(base, ldb, cols, kc, kNR, out + p * panel_size);
    else
      pack_pairs_plain([&](int64_t j, int64_t k) { return base[j * ldb + k]; }, cols, kNR, kc, out + p * panel_size);
  }
}

}  // namespace meshtrain::kernels::MT_ISA_NS::packed_gemm_detail
MT_ISA_END
#endif
