// Attention tiles: which (query, key) pairs of a tile are legal (causality
// and document ids), the tile geometry, and folding one query tile over a
// key range with online softmax. Internal to attention.cc.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/per_isa/attention_microkernels.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS::attention_detail {
// ---------------------------------------------------------------------------
// Which (query, key) pairs of a tile are legal: key pos <= query pos and equal
// document ids. Ids need not be sorted: disjoint [min, max] ranges of the two
// tiles already prove no pair matches (with packed rows that is most tiles).
enum class TileKind { kSkip, kFull, kPartial };

struct TileGeom {
  int64_t qp0;  // global position of the first query of the tile
  int nq;
  const int32_t* qseg;  // nullptr: one document
  int64_t kp0;
  int nk;
  const int32_t* kseg;
};

inline void seg_range(const int32_t* s, int n, int32_t& lo, int32_t& hi) {
  lo = hi = s[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, s[i]);
    hi = std::max(hi, s[i]);
  }
}

inline TileKind classify(const TileGeom& g) {
  if (g.kp0 > g.qp0 + g.nq - 1) return TileKind::kSkip;
  const bool causal_full = g.kp0 + g.nk - 1 <= g.qp0;
  if (!g.qseg) return causal_full ? TileKind::kFull : TileKind::kPartial;
  int32_t qlo, qhi, klo, khi;
  seg_range(g.qseg, g.nq, qlo, qhi);
  seg_range(g.kseg, g.nk, klo, khi);
  if (qhi < klo || khi < qlo) return TileKind::kSkip;
  if (causal_full && qlo == qhi && klo == khi && qlo == klo) return TileKind::kFull;
  return TileKind::kPartial;
}

// S *= scale, illegal entries -> -inf (partial tiles only), S row-major ld kBk.
template <typename T>
void scale_and_mask(T* S, const TileGeom& g, TileKind kind, T scale) {
  for (int i = 0; i < g.nq; ++i) {
    T* s = S + i * kBk;
    if (kind == TileKind::kFull) {
#pragma omp simd
      for (int j = 0; j < g.nk; ++j) s[j] *= scale;
      continue;
    }
    const int64_t jlim = g.qp0 + i - g.kp0;  // last causally legal key index
    if (!g.qseg) {
#pragma omp simd
      for (int j = 0; j < g.nk; ++j) s[j] = j <= jlim ? s[j] * scale : kNegInf<T>;
      continue;
    }
    const int32_t sq = g.qseg[i];
#pragma omp simd
    for (int j = 0; j < g.nk; ++j) s[j] = j <= jlim && g.kseg[j] == sq ? s[j] * scale : kNegInf<T>;
  }
}

// Asks for n rows of D elements, ld apart, to be brought into the cache
// (for writing when `write`); no effect on any value.
template <typename T>
void prefetch_rows(const T* x, int64_t ld, int64_t n, int64_t D, bool write) {
  constexpr int64_t kLine = 64 / int64_t(sizeof(T));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < D; d += kLine) {
      if (write) __builtin_prefetch(x + j * ld + d, 1, 3);
      else __builtin_prefetch(x + j * ld + d, 0, 3);
    }
}

// Strided rows are asked for a few ahead of their use: rows 1-2 KiB apart
// sit two to four on a page, too few for the hardware prefetchers.
constexpr int kRowsAhead = 8;

// An input element as T: itself, or the f32 of bf16 bits (exact).
template <typename T, typename In>
inline T widen(In x) {
  if constexpr (std::is_same_v<In, uint16_t>) return std::bit_cast<float>(uint32_t(x) << 16);
  else return x;
}

// One row of D inputs as T (a copy, or bf16 widened).
template <typename T, typename In>
void widen_row(const In* x, int64_t D, T* out) {
  if constexpr (std::is_same_v<T, In>) {
    std::memcpy(out, x, sizeof(T) * D);
  } else {
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) out[d] = widen<T>(x[d]);
  }
}

// Copies nk rows of a strided K/V/Q tile into contiguous [nk, D] as T:
// rows 1-2 KiB apart alias in a few L1 sets, so GEMM operands are packed
// first (and bf16 inputs widened there, docs/math.md (M.80)).
template <typename T, typename In>
void pack_rows(const In* x, int64_t ld, int n, int64_t D, T* out) {
  prefetch_rows(x, ld, std::min(n, kRowsAhead), D, false);
  for (int j = 0; j < n; ++j) {
    if (j + kRowsAhead < n) prefetch_rows(x + (j + kRowsAhead) * ld, ld, 1, D, false);
    widen_row(x + j * ld, D, out + j * D);
  }
}

// Same on the transposed tile St [nk, kBq] (row j = key, column i = query).
template <typename T>
void scale_and_mask_t(T* St, const TileGeom& g, TileKind kind, T scale) {
  for (int j = 0; j < g.nk; ++j) {
    T* s = St + j * kBq;
    if (kind == TileKind::kFull) {
#pragma omp simd
      for (int i = 0; i < g.nq; ++i) s[i] *= scale;
      continue;
    }
    const int64_t ilo = g.kp0 + j - g.qp0;  // first query that may see key j
    if (!g.kseg) {
#pragma omp simd
      for (int i = 0; i < g.nq; ++i) s[i] = i >= ilo ? s[i] * scale : kNegInf<T>;
      continue;
    }
    const int32_t sk = g.kseg[j];
#pragma omp simd
    for (int i = 0; i < g.nq; ++i) s[i] = i >= ilo && g.qseg[i] == sk ? s[i] * scale : kNegInf<T>;
  }
}

// Transposes n rows of a Q/K/V tile [n, ld] into [D, ldt] (register blocks
// for f32; the rows are 1-2 KiB apart, so element-wise stores crawl). bf16
// rows are widened into a contiguous tile first.
template <typename T, typename In>
void transpose_rows(const In* x, int64_t ld, int n, int64_t D, T* xt, int64_t ldt) {
  if constexpr (!std::is_same_v<T, In>) {
    thread_local std::vector<T> rows;
    if (rows.size() < static_cast<size_t>(n * D)) rows.resize(static_cast<size_t>(n * D));
    pack_rows(x, ld, n, D, rows.data());
    return transpose_rows(static_cast<const T*>(rows.data()), D, n, D, xt, ldt);
  } else {
#if defined(MT_HAVE_VECF)
    if constexpr (std::is_same_v<T, float>) return transpose_block(x, ld, n, static_cast<int>(D), xt, ldt);
#endif
    for (int j = 0; j < n; ++j)
      for (int64_t d = 0; d < D; ++d) xt[d * ldt + j] = x[j * ld + d];
  }
}

// Everything a fold over one (batch row, query head, query tile) needs.
template <typename T>
struct QueryTile {
  const T* q;  // first query row, stride ldq
  int64_t ldq;
  int nq;
  int64_t qp0;
  const int32_t* qseg;
};
template <typename T>
struct KeyRange {
  const T* k;  // first key row of the kv head, stride ldk
  const T* v;
  int64_t ldk;
  int64_t nkeys;
  int64_t kp0;
  const int32_t* kseg;
};

// The one forward code path: folds all key tiles of `kr` into the state
// (o [nq, D] contiguous, a, l [nq]) of one query tile, online softmax. The
// score tile is built transposed, St = K Q^T, so Q is transposed once per
// query tile (not K once per key tile) and the per-query max and exp-sum run
// vectorized across queries; P V reads P^T through strides.
template <typename T, typename In>
void fold_query_tile(int64_t D, const QueryTile<In>& qt, const KeyRange<In>& kr, T scale, T* o, T* a, T* l) {
  constexpr bool kWiden = !std::is_same_v<T, In>;  // bf16 K is packed (widened) too
  T* qtr = thread_scratch<T>(static_cast<size_t>((kWiden ? 3 : 2) * D) * kBk + kBq * kBk + 3 * kBq);
  T* vp = qtr + D * kBq;  // packed V tile [nk, D]
  T* St = vp + D * kBk;   // [nk, kBq]
  T* mcol = St + kBq * kBk;
  T* mnew = mcol + kBq;
  T* colsum = mnew + kBq;
  T* kp = colsum + kBq;  // packed K tile [nk, D] (bf16 inputs only)
  transpose_rows(qt.q, qt.ldq, qt.nq, D, qtr, kBq);
  for (int64_t j0 = 0; j0 < kr.nkeys; j0 += kBk) {
    const TileGeom g{qt.qp0, qt.nq, qt.qseg, kr.kp0 + j0, static_cast<int>(std::min<int64_t>(kBk, kr.nkeys - j0)),
                     kr.kseg ? kr.kseg + j0 : nullptr};
    if (g.kp0 > g.qp0 + g.nq - 1) break;  // keys only move further right
    const TileKind kind = classify(g);
    if (kind == TileKind::kSkip) continue;
    // Query i sees key j of this tile when i >= j + kp0 - qp0 (causality).
    const T* kt = nullptr;  // the key rows, ldk_t apart
    int64_t ldk_t = D;
    if constexpr (kWiden) {
      pack_rows(kr.k + j0 * kr.ldk, kr.ldk, g.nk, D, kp);
      kt = kp;
    } else {
      kt = kr.k + j0 * kr.ldk;
      ldk_t = kr.ldk;
    }
    tile_gemm<T>(g.nk, g.nq, static_cast<int>(D), kt, ldk_t, 1, qtr, kBq, St, kBq, false,
                 {CausalTrim::kColsFrom, g.kp0 - g.qp0});
    scale_and_mask_t(St, g, kind, scale);
    max_cols(St, kBq, g.nk, g.nq, mcol);
    for (int i = 0; i < g.nq; ++i) mnew[i] = std::max(a[i], mcol[i]);
    exp_cols(St, kBq, g.nk, g.nq, mnew, colsum);
    T* alpha = mcol;  // rescale factors e^{a - mnew}, 0 when a = -inf; vectorized
#pragma omp simd
    for (int i = 0; i < g.nq; ++i) alpha[i] = mnew[i] == kNegInf<T> ? T(1) : exp_t(a[i] - mnew[i]);
    for (int i = 0; i < g.nq; ++i) {
      if (mnew[i] == kNegInf<T>) continue;  // no legal key yet: the row stays an explicit zero state
      l[i] = alpha[i] * l[i] + colsum[i];
      a[i] = mnew[i];
      if (alpha[i] != T(1)) {
        T* orow = o + i * D;
        const T ai = alpha[i];
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) orow[d] *= ai;
      }
    }
    pack_rows(kr.v + j0 * kr.ldk, kr.ldk, g.nk, D, vp);
    tile_gemm<T>(g.nq, static_cast<int>(D), g.nk, St, 1, kBq, vp, D, o, D, true,
                 {CausalTrim::kKBelow, g.qp0 - g.kp0 + 1});
  }
}

// Below this many multiply-adds a parallel region costs more than it saves
// (and spins badly when the cores are oversubscribed).
constexpr double kParallelMacs = 1 << 20;

inline double attention_macs(const AttentionShape& s, int64_t nq, int64_t nk) {
  return double(s.batch) * double(s.q_heads) * double(nq) * double(nk) * double(s.head_dim);
}

inline void check_shape(const AttentionShape& s) {
  MT_CHECK(s.batch >= 1 && s.q_heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1, "bad attention shape");
  MT_CHECK(s.q_heads % s.kv_heads == 0, "q_heads ", s.q_heads, " not a multiple of kv_heads ", s.kv_heads);
}

inline void check_spans(const AttentionSpan& qs, const AttentionSpan& ks) {
  MT_CHECK(qs.len >= 0 && ks.len >= 0, "negative span length");
  MT_CHECK((qs.seg == nullptr) == (ks.seg == nullptr), "query and key spans must both have document ids or neither");
}

template <typename T>
QueryTile<T> query_tile(const AttentionShape& s, const T* q, const AttentionSpan& qs, int64_t b, int64_t h, int64_t i0) {
  const int64_t ldq = s.q_heads * s.head_dim;
  return {q + (b * qs.len + i0) * ldq + h * s.head_dim, ldq, static_cast<int>(std::min<int64_t>(kBq, qs.len - i0)),
          qs.pos0 + i0, qs.seg ? qs.seg + b * qs.len + i0 : nullptr};
}

template <typename T>
KeyRange<T> key_range(const AttentionShape& s, const T* k, const T* v, const AttentionSpan& ks, int64_t b,
                      int64_t hk) {
  const int64_t ldk = s.kv_heads * s.head_dim, row = ks.row_stride ? ks.row_stride : ks.len;
  const int64_t off = b * row * ldk + hk * s.head_dim;
  return {k + off, v + off, ldk, ks.len, ks.pos0, ks.seg ? ks.seg + b * row : nullptr};
}

}  // namespace meshtrain::kernels::MT_ISA_NS::attention_detail
MT_ISA_END
