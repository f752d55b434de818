// Causal attention on CPU: flash-style tiles with online softmax, GQA, packed
// documents, and the softmax-state pieces context parallelism merges.
//   q, out, dq    [B, Tq, Hq, D]     row stride Hq * D
//   k, v, dk, dv  [B, Tk, Hkv, D]    row stride Hkv * D; query head h reads kv head h / (Hq / Hkv)
//   seg           [B, T] int32 document ids (per span)
//   lse           [B, Hq, Tq]
//   state         o [B, Hq, Tq, D], a and l [B, Hq, Tq]
// Tiles are kBq queries x kBk keys; only the S/P tile (kBq x kBk) and one
// transposed K (and V) tile live in per-thread scratch, never T x T.
#include "meshtrain/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12's AVX-512 headers trip false uninitialized warnings (_mm512_undefined_ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "meshtrain/core/error.h"

namespace meshtrain::kernels {
namespace {

// 64 x 64 tiles: S (16 KiB in f32) plus a transposed K tile stay in L1/L2.
constexpr int kBq = 64;
constexpr int kBk = 64;

template <typename T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

// Grown once per thread (OpenMP threads persist), so no allocation per call.
template <typename T>
T* thread_scratch(size_t n) {
  thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// ---------------------------------------------------------------------------
// Tile GEMM: C[m, n] (+)= A[m, k] B[k, n], A(i, p) = A[i * a_rs + p * a_cs]
// (strided so P^T and dS^T need no copy), B and C row-major with ld.
template <typename T>
void tile_gemm(int m, int n, int k, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t ldb, T* C,
               int64_t ldc, bool accumulate) {
  for (int i = 0; i < m; ++i) {
    T* __restrict c = C + i * ldc;
    if (!accumulate)
      for (int j = 0; j < n; ++j) c[j] = 0;
    for (int p = 0; p < k; ++p) {
      const T a = A[i * a_rs + p * a_cs];
      const T* __restrict b = B + p * ldb;
#pragma omp simd
      for (int j = 0; j < n; ++j) c[j] += a * b[j];
    }
  }
}

#if defined(__AVX512F__)
// Register-blocked R rows x V*16 columns; the last vector is masked by `tail`.
template <int R, int V>
void micro_f32(int k, const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t ldb, float* C, int64_t ldc,
               __mmask16 tail, bool accumulate) {
  // Fully unrolled so the R x V accumulators stay in registers.
  __m512 c[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      c[r][v] = accumulate ? _mm512_maskz_loadu_ps(v == V - 1 ? tail : 0xFFFF, C + r * ldc + 16 * v)
                           : _mm512_setzero_ps();
  for (int p = 0; p < k; ++p) {
    __m512 b[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) b[v] = _mm512_maskz_loadu_ps(v == V - 1 ? tail : 0xFFFF, B + p * ldb + 16 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * a_rs + p * a_cs]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(C + r * ldc + 16 * v, v == V - 1 ? tail : 0xFFFF, c[r][v]);
}

using MicroFn = void (*)(int, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, __mmask16, bool);
constexpr MicroFn kMicro[4][4] = {
    {micro_f32<1, 1>, micro_f32<1, 2>, micro_f32<1, 3>, micro_f32<1, 4>},
    {micro_f32<2, 1>, micro_f32<2, 2>, micro_f32<2, 3>, micro_f32<2, 4>},
    {micro_f32<3, 1>, micro_f32<3, 2>, micro_f32<3, 3>, micro_f32<3, 4>},
    {micro_f32<4, 1>, micro_f32<4, 2>, micro_f32<4, 3>, micro_f32<4, 4>},
};

template <>
void tile_gemm<float>(int m, int n, int k, const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t ldb,
                      float* C, int64_t ldc, bool accumulate) {
  for (int j0 = 0; j0 < n; j0 += 64) {
    const int cols = std::min(64, n - j0);
    const int nv = (cols + 15) / 16;
    const int rem = cols - 16 * (nv - 1);
    const __mmask16 tail = static_cast<__mmask16>(rem == 16 ? 0xFFFF : (1u << rem) - 1);
    for (int i0 = 0; i0 < m; i0 += 4) {
      const int rows = std::min(4, m - i0);
      kMicro[rows - 1][nv - 1](k, A + i0 * a_rs, a_rs, a_cs, B + j0, ldb, C + i0 * ldc + j0, ldc, tail, accumulate);
    }
  }
}

// e^x for x <= 0 (Cephes polynomial, ~1 ulp); 2^n applied with scalef so
// large negative x underflows cleanly to 0.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.37f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(y, n);
}
#endif

// p[j] = e^{s[j] - m} in place (exactly 0 where s is -inf, i.e. masked);
// returns sum_j p[j]. m is finite.
template <typename T>
T exp_row(T* s, int n, T m) {
  T sum = 0;
  for (int j = 0; j < n; ++j) {
    const T p = s[j] == kNegInf<T> ? T(0) : std::exp(s[j] - m);
    s[j] = p;
    sum += p;
  }
  return sum;
}

#if defined(__AVX512F__)
template <>
float exp_row<float>(float* s, int n, float m) {
  const __m512 vm = _mm512_set1_ps(m);
  const __m512 ninf = _mm512_set1_ps(kNegInf<float>);
  __m512 acc = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __mmask16 in = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(in, s + j);
    const __mmask16 legal = _mm512_mask_cmp_ps_mask(in, x, ninf, _CMP_NEQ_OQ);
    const __m512 p = _mm512_maskz_mov_ps(legal, exp_ps(_mm512_sub_ps(x, vm)));
    _mm512_mask_storeu_ps(s + j, in, p);
    acc = _mm512_add_ps(acc, p);
  }
  return _mm512_reduce_add_ps(acc);
}
#endif

// Transposed tile St [nk, ld] (one row per key, one column per query):
// St[j][i] = e^{St[j][i] - m[i]} (exactly 0 where -inf, i.e. masked), and
// colsum[i] = sum_j St[j][i]. Columns whose m is -inf are all masked.
template <typename T>
void exp_cols(T* St, int64_t ld, int nk, int nq, const T* m, T* colsum) {
  std::fill(colsum, colsum + nq, T(0));
  for (int j = 0; j < nk; ++j) {
    T* row = St + j * ld;
    for (int i = 0; i < nq; ++i) {
      const T p = row[i] == kNegInf<T> ? T(0) : std::exp(row[i] - m[i]);
      row[i] = p;
      colsum[i] += p;
    }
  }
}

#if defined(__AVX512F__)
template <>
void exp_cols<float>(float* St, int64_t ld, int nk, int nq, const float* m, float* colsum) {
  const __m512 ninf = _mm512_set1_ps(kNegInf<float>);
  for (int i = 0; i < nq; i += 16) {
    const __mmask16 in = static_cast<__mmask16>(nq - i >= 16 ? 0xFFFF : (1u << (nq - i)) - 1);
    const __m512 vm = _mm512_maskz_loadu_ps(in, m + i);
    __m512 acc = _mm512_setzero_ps();
    for (int j = 0; j < nk; ++j) {
      float* row = St + j * ld + i;
      const __m512 x = _mm512_maskz_loadu_ps(in, row);
      const __mmask16 legal = _mm512_mask_cmp_ps_mask(in, x, ninf, _CMP_NEQ_OQ);
      const __m512 p = _mm512_maskz_mov_ps(legal, exp_ps(_mm512_sub_ps(x, vm)));
      _mm512_mask_storeu_ps(row, in, p);
      acc = _mm512_add_ps(acc, p);
    }
    _mm512_mask_storeu_ps(colsum + i, in, acc);
  }
}
#endif

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

TileKind classify(const TileGeom& g) {
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
    const int32_t sq = g.qseg ? g.qseg[i] : 0;
    for (int j = 0; j < g.nk; ++j) {
      const bool legal = j <= jlim && (!g.qseg || g.kseg[j] == sq);
      s[j] = legal ? s[j] * scale : kNegInf<T>;
    }
  }
}

// Copies nk rows of a strided K/V/Q tile into contiguous [nk, D]: rows 1-2 KiB
// apart alias in a few L1 sets, so GEMM operands are packed first.
template <typename T>
void pack_rows(const T* x, int64_t ld, int n, int64_t D, T* out) {
  for (int j = 0; j < n; ++j) std::memcpy(out + j * D, x + j * ld, sizeof(T) * D);
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
    const int32_t sk = g.kseg ? g.kseg[j] : 0;
    for (int i = 0; i < g.nq; ++i) {
      const bool legal = i >= ilo && (!g.kseg || g.qseg[i] == sk);
      s[i] = legal ? s[i] * scale : kNegInf<T>;
    }
  }
}

// Transposes a K/V tile [nk rows, ld] into Kt [D, kBk].
template <typename T>
void transpose_tile(const T* k, int64_t ld, int nk, int64_t D, T* kt) {
  for (int j = 0; j < nk; ++j)
    for (int64_t d = 0; d < D; ++d) kt[d * kBk + j] = k[j * ld + d];
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
template <typename T>
void fold_query_tile(int64_t D, const QueryTile<T>& qt, const KeyRange<T>& kr, T scale, T* o, T* a, T* l) {
  T* qtr = thread_scratch<T>(static_cast<size_t>(2 * D) * kBk + kBq * kBk + 3 * kBq);
  T* vp = qtr + D * kBq;  // packed V tile [nk, D]
  T* St = vp + D * kBk;   // [nk, kBq]
  T* mcol = St + kBq * kBk;
  T* mnew = mcol + kBq;
  T* colsum = mnew + kBq;
  for (int i = 0; i < qt.nq; ++i)
    for (int64_t d = 0; d < D; ++d) qtr[d * kBq + i] = qt.q[i * qt.ldq + d];
  for (int64_t j0 = 0; j0 < kr.nkeys; j0 += kBk) {
    const TileGeom g{qt.qp0, qt.nq, qt.qseg, kr.kp0 + j0, static_cast<int>(std::min<int64_t>(kBk, kr.nkeys - j0)),
                     kr.kseg ? kr.kseg + j0 : nullptr};
    if (g.kp0 > g.qp0 + g.nq - 1) break;  // keys only move further right
    const TileKind kind = classify(g);
    if (kind == TileKind::kSkip) continue;
    tile_gemm<T>(g.nk, g.nq, static_cast<int>(D), kr.k + j0 * kr.ldk, kr.ldk, 1, qtr, kBq, St, kBq, false);
    scale_and_mask_t(St, g, kind, scale);
    std::fill(mcol, mcol + g.nq, kNegInf<T>);
    for (int j = 0; j < g.nk; ++j) {
      const T* s = St + j * kBq;
#pragma omp simd
      for (int i = 0; i < g.nq; ++i) mcol[i] = s[i] > mcol[i] ? s[i] : mcol[i];
    }
    for (int i = 0; i < g.nq; ++i) mnew[i] = std::max(a[i], mcol[i]);
    exp_cols(St, kBq, g.nk, g.nq, mnew, colsum);
    for (int i = 0; i < g.nq; ++i) {
      if (mnew[i] == kNegInf<T>) continue;   // no legal key yet: the row stays an explicit zero state
      const T alpha = std::exp(a[i] - mnew[i]);  // 0 when a[i] = -inf
      l[i] = alpha * l[i] + colsum[i];
      a[i] = mnew[i];
      if (alpha != T(1)) {
        T* orow = o + i * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) orow[d] *= alpha;
      }
    }
    pack_rows(kr.v + j0 * kr.ldk, kr.ldk, g.nk, D, vp);
    tile_gemm<T>(g.nq, static_cast<int>(D), g.nk, St, 1, kBq, vp, D, o, D, true);
  }
}

// Below this many multiply-adds a parallel region costs more than it saves
// (and spins badly when the cores are oversubscribed).
constexpr double kParallelMacs = 1 << 20;

double attention_macs(const AttentionShape& s, int64_t nq, int64_t nk) {
  return double(s.batch) * double(s.q_heads) * double(nq) * double(nk) * double(s.head_dim);
}

void check_shape(const AttentionShape& s) {
  MT_CHECK(s.batch >= 1 && s.q_heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1, "bad attention shape");
  MT_CHECK(s.q_heads % s.kv_heads == 0, "q_heads ", s.q_heads, " not a multiple of kv_heads ", s.kv_heads);
}

void check_spans(const AttentionSpan& qs, const AttentionSpan& ks) {
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
  const int64_t ldk = s.kv_heads * s.head_dim;
  const int64_t off = b * ks.len * ldk + hk * s.head_dim;
  return {k + off, v + off, ldk, ks.len, ks.pos0, ks.seg ? ks.seg + b * ks.len : nullptr};
}

}  // namespace

// ---------------------------------------------------------------------------
template <typename T>
void softmax_state_init(SoftmaxState<T> st, int64_t rows, int64_t head_dim) {
  std::fill(st.a, st.a + rows, kNegInf<T>);
  std::fill(st.l, st.l + rows, T(0));
  std::fill(st.o, st.o + rows * head_dim, T(0));
}

// (29.15) a = max(a1, a2), l = e^{a1-a} l1 + e^{a2-a} l2; (29.16) o likewise.
// A fully masked side (a = -inf) gets weight exactly 0 instead of e^{-inf - (-inf)}.
template <typename T>
void softmax_state_merge(SoftmaxState<T> into, const SoftmaxState<T>& other, int64_t rows, int64_t head_dim) {
#pragma omp parallel for schedule(static) if (rows * head_dim > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const T a1 = into.a[r], a2 = other.a[r];
    if (a2 == kNegInf<T>) continue;  // other contributes nothing
    T* o1 = into.o + r * head_dim;
    const T* o2 = other.o + r * head_dim;
    if (a1 == kNegInf<T>) {  // into is empty: take other as is
      into.a[r] = a2;
      into.l[r] = other.l[r];
      std::copy(o2, o2 + head_dim, o1);
      continue;
    }
    const T a = std::max(a1, a2);
    const T w1 = std::exp(a1 - a), w2 = std::exp(a2 - a);
    into.a[r] = a;
    into.l[r] = w1 * into.l[r] + w2 * other.l[r];
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) o1[d] = w1 * o1[d] + w2 * o2[d];
  }
}

template <typename T>
void softmax_state_finalize(const AttentionShape& s, int64_t qs_len, const SoftmaxState<T>& st, T* out, T* lse) {
  check_shape(s);
  const int64_t H = s.q_heads, D = s.head_dim;
#pragma omp parallel for collapse(2) schedule(static) if (s.batch * H * qs_len * D > (1 << 16))
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < qs_len; ++t) {
        const int64_t r = (b * H + h) * qs_len + t;
        T* y = out + ((b * qs_len + t) * H + h) * D;
        const T l = st.l[r];
        const T inv = l > T(0) ? T(1) / l : T(0);
        const T* o = st.o + r * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) y[d] = o[d] * inv;
        lse[r] = l > T(0) ? st.a[r] + std::log(l) : kNegInf<T>;
      }
}

template <typename T>
void attention_partial_forward(const AttentionShape& s, const T* q, AttentionSpan qs, const T* k, const T* v,
                               AttentionSpan ks, T scale, SoftmaxState<T> state) {
  check_shape(s);
  check_spans(qs, ks);
  const int64_t H = s.q_heads, D = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t ntiles = (qs.len + kBq - 1) / kBq;
  const bool par = attention_macs(s, qs.len, ks.len) > kParallelMacs;
#pragma omp parallel for collapse(3) schedule(dynamic) if (par)
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t it = 0; it < ntiles; ++it) {
        const int64_t r0 = (b * H + h) * qs.len + it * kBq;
        fold_query_tile(D, query_tile(s, q, qs, b, h, it * kBq), key_range(s, k, v, ks, b, h / group), scale,
                        state.o + r0 * D, state.a + r0, state.l + r0);
      }
}

template <typename T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const int32_t* seg, T scale,
                       T* out, T* lse) {
  check_shape(s);
  const AttentionSpan sp{s.seq, 0, seg};
  const int64_t H = s.q_heads, D = s.head_dim, T_ = s.seq, group = s.q_heads / s.kv_heads;
  const int64_t ntiles = (T_ + kBq - 1) / kBq;
  const bool par = attention_macs(s, T_, T_) / 2 > kParallelMacs;
#pragma omp parallel for collapse(3) schedule(dynamic) if (par)
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t it = 0; it < ntiles; ++it) {
        const QueryTile<T> qt = query_tile(s, q, sp, b, h, it * kBq);
        // Per-thread state for this tile; fold_query_tile's scratch sits in another buffer.
        thread_local std::vector<T> state_buf;
        if (state_buf.size() < static_cast<size_t>(kBq * (D + 2))) state_buf.resize(kBq * (D + 2));
        T* o = state_buf.data();
        T* a = o + kBq * D;
        T* l = a + kBq;
        softmax_state_init(SoftmaxState<T>{o, a, l}, qt.nq, D);
        fold_query_tile(D, qt, key_range(s, k, v, sp, b, h / group), scale, o, a, l);
        for (int i = 0; i < qt.nq; ++i) {
          T* y = out + ((b * T_ + it * kBq + i) * H + h) * D;
          const T inv = l[i] > T(0) ? T(1) / l[i] : T(0);
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) y[d] = o[i * D + d] * inv;
          lse[(b * H + h) * T_ + it * kBq + i] = l[i] > T(0) ? a[i] + std::log(l[i]) : kNegInf<T>;
        }
      }
}

// FlashAttention-2 style backward. One task per (batch row, kv head) owns dk,
// dv of that head and dq of its query heads, so nothing is shared between
// threads; P is recomputed from lse and D_i = rowsum(dout_i * out_i).
template <typename T>
void attention_partial_backward(const AttentionShape& s, const T* q, AttentionSpan qs, const T* k, const T* v,
                                AttentionSpan ks, T scale, const T* out, const T* lse, const T* dout, T* dq, T* dk,
                                T* dv) {
  check_shape(s);
  check_spans(qs, ks);
  const int64_t H = s.q_heads, Hk = s.kv_heads, D = s.head_dim, group = H / Hk;
  const int64_t ldq = H * D;
  const bool par = attention_macs(s, qs.len, ks.len) > kParallelMacs;
#pragma omp parallel for collapse(2) schedule(dynamic) if (par)
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t hk = 0; hk < Hk; ++hk) {
      const size_t tile_elems = static_cast<size_t>(D) * kBk;
      T* kt = thread_scratch<T>(2 * tile_elems + 2 * kBq * kBk + group * qs.len);
      T* vt = kt + tile_elems;
      T* P = vt + tile_elems;
      T* dS = P + kBq * kBk;
      T* delta = dS + kBq * kBk;  // [group, qs.len]
      for (int64_t g = 0; g < group; ++g)
        for (int64_t t = 0; t < qs.len; ++t) {
          const int64_t off = (b * qs.len + t) * ldq + (hk * group + g) * D;
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t d = 0; d < D; ++d) acc += dout[off + d] * out[off + d];
          delta[g * qs.len + t] = acc;
        }
      const KeyRange<T> kr = key_range(s, k, v, ks, b, hk);
      T* dk_b = dk + (kr.k - k);
      T* dv_b = dv + (kr.k - k);
      for (int64_t j0 = 0; j0 < ks.len; j0 += kBk) {
        const int nk = static_cast<int>(std::min<int64_t>(kBk, ks.len - j0));
        const int64_t kp0 = ks.pos0 + j0;
        if (kp0 > qs.pos0 + qs.len - 1) break;  // no query sees these keys
        bool transposed = false;
        for (int64_t g = 0; g < group; ++g) {
          const int64_t h = hk * group + g;
          // First query tile that can see key tile j0.
          const int64_t first = std::max<int64_t>(0, (kp0 - qs.pos0) / kBq * kBq);
          for (int64_t i0 = first; i0 < qs.len; i0 += kBq) {
            const QueryTile<T> qt = query_tile(s, q, qs, b, h, i0);
            const TileGeom geo{qt.qp0, qt.nq, qt.qseg, kp0, nk, kr.kseg ? kr.kseg + j0 : nullptr};
            const TileKind kind = classify(geo);
            if (kind == TileKind::kSkip) continue;
            if (!transposed) {
              transpose_tile(kr.k + j0 * kr.ldk, kr.ldk, nk, D, kt);
              transpose_tile(kr.v + j0 * kr.ldk, kr.ldk, nk, D, vt);
              transposed = true;
            }
            const T* do_t = dout + (qt.q - q);
            T* dq_t = dq + (qt.q - q);
            const int Di = static_cast<int>(D);
            tile_gemm<T>(qt.nq, nk, Di, qt.q, ldq, 1, kt, kBk, P, kBk, false);
            scale_and_mask(P, geo, kind, scale);
            for (int i = 0; i < qt.nq; ++i) {
              const T m = lse[(b * H + h) * qs.len + i0 + i];
              T* p = P + i * kBk;
              if (m == kNegInf<T>) {  // row without a legal key: no gradient
                std::fill(p, p + nk, T(0));
                continue;
              }
              exp_row(p, nk, m);
            }
            // dV += P^T dO
            tile_gemm<T>(nk, Di, qt.nq, P, 1, kBk, do_t, ldq, dv_b + j0 * kr.ldk, kr.ldk, true);
            // dP = dO V^T; dS = scale * P * (dP - D_i)
            tile_gemm<T>(qt.nq, nk, Di, do_t, ldq, 1, vt, kBk, dS, kBk, false);
            for (int i = 0; i < qt.nq; ++i) {
              const T di = delta[g * qs.len + i0 + i];
              T* ds = dS + i * kBk;
              const T* p = P + i * kBk;
#pragma omp simd
              for (int j = 0; j < nk; ++j) ds[j] = scale * p[j] * (ds[j] - di);
            }
            // dQ += dS K; dK += dS^T Q
            tile_gemm<T>(qt.nq, Di, nk, dS, kBk, 1, kr.k + j0 * kr.ldk, kr.ldk, dq_t, ldq, true);
            tile_gemm<T>(nk, Di, qt.nq, dS, 1, kBk, qt.q, ldq, dk_b + j0 * kr.ldk, kr.ldk, true);
          }
        }
      }
    }
}

template <typename T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const int32_t* seg, T scale,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  check_shape(s);
  const int64_t nq = s.batch * s.seq * s.q_heads * s.head_dim;
  const int64_t nk = s.batch * s.seq * s.kv_heads * s.head_dim;
  std::memset(dq, 0, sizeof(T) * nq);
  std::memset(dk, 0, sizeof(T) * nk);
  std::memset(dv, 0, sizeof(T) * nk);
  const AttentionSpan sp{s.seq, 0, seg};
  attention_partial_backward(s, q, sp, k, v, sp, scale, out, lse, dout, dq, dk, dv);
}

#define MT_ATTENTION_INSTANTIATE(T)                                                                                 \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*, const int32_t*, T, T*,   \
                                     T*);                                                                          \
  template void attention_backward<T>(const AttentionShape&, const T*, const T*, const T*, const int32_t*, T,      \
                                      const T*, const T*, const T*, T*, T*, T*);                                   \
  template void softmax_state_merge<T>(SoftmaxState<T>, const SoftmaxState<T>&, int64_t, int64_t);                 \
  template void softmax_state_init<T>(SoftmaxState<T>, int64_t, int64_t);                                          \
  template void softmax_state_finalize<T>(const AttentionShape&, int64_t, const SoftmaxState<T>&, T*, T*);         \
  template void attention_partial_forward<T>(const AttentionShape&, const T*, AttentionSpan, const T*, const T*,   \
                                             AttentionSpan, T, SoftmaxState<T>);                                   \
  template void attention_partial_backward<T>(const AttentionShape&, const T*, AttentionSpan, const T*, const T*,  \
                                              AttentionSpan, T, const T*, const T*, const T*, T*, T*, T*);

MT_ATTENTION_INSTANTIATE(float)
MT_ATTENTION_INSTANTIATE(double)
#undef MT_ATTENTION_INSTANTIATE

}  // namespace meshtrain::kernels
