// Attention micro-kernels: the register-blocked tile GEMM and the
// exponentials of the online softmax. One source for every level: the tile
// GEMM uses the level's vectors (vec.h: 16 lanes on AVX-512, 8 on AVX2), and
// so do the softmax's exponentials (softmax_exp); the scalar level and
// double run plain loops over fast_exp and std::exp.
// Internal to attention.cc.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/vec.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS::attention_detail {

// 64 x 64 tiles: S (16 KiB in f32) plus a transposed K tile stay in L1/L2.
constexpr int kBq = 64;
constexpr int kBk = 64;

template <typename T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

inline float exp_t(float x) { return fast_exp(x); }  // vectorizes in omp simd loops
inline double exp_t(double x) { return std::exp(x); }

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
void tile_gemm_loops(int m, int n, int k, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t ldb, T* C,
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

#if defined(MT_HAVE_VECF)
// Register-blocked R rows x V vectors of C; the last vector is masked by
// `tail`. Fully unrolled so the R x V accumulators stay in registers.
template <int R, int V>
void micro_f32(int k, const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t ldb, float* C, int64_t ldc,
               Tail tail, bool accumulate) {
  VecF c[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      c[r][v] = !accumulate ? VecF{} : v == V - 1 ? load(C + r * ldc + kLanes * v, tail) : load(C + r * ldc + kLanes * v);
  for (int p = 0; p < k; ++p) {
    VecF b[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) b[v] = v == V - 1 ? load(B + p * ldb + kLanes * v, tail) : load(B + p * ldb + kLanes * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const VecF a = broadcast(A[r * a_rs + p * a_cs]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) c[r][v] += a * b[v];  // one FMA
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      if (v == V - 1) store(C + r * ldc + kLanes * v, c[r][v], tail);
      else store(C + r * ldc + kLanes * v, c[r][v]);
    }
}

using MicroFn = void (*)(int, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, Tail, bool);

// kMicro[R - 1][V - 1] = micro_f32<R, V>, built at compile time.
template <int R, int... V>
constexpr std::array<MicroFn, kMicroVecs> micro_row(std::integer_sequence<int, V...>) {
  return {micro_f32<R, V + 1>...};
}
template <int... R>
constexpr std::array<std::array<MicroFn, kMicroVecs>, kMicroRows> micro_table(std::integer_sequence<int, R...>) {
  return {micro_row<R + 1>(std::make_integer_sequence<int, kMicroVecs>{})...};
}
#endif

// Causal trim of a tile GEMM: the products a causal mask discards are
// skipped, never computed. Row r of C needs only the columns (or the k
// terms) on the legal side of r + offset:
//   kColsFrom  c >= r + offset     kColsBelow  c < r + offset
//   kKFrom     p >= r + offset     kKBelow     p < r + offset
// Trimmed columns of C are left as they were (the mask that follows
// overwrites them); trimmed k terms are exact zeros (masked probabilities),
// so each sum is the same bits with or without them. Trimming works in
// whole register blocks (kMicroRows rows, kLanes columns), so some masked
// products are still computed. The plain loops compute everything.
struct CausalTrim {
  enum Kind { kNone, kColsFrom, kColsBelow, kKFrom, kKBelow } kind = kNone;
  int64_t offset = 0;
};

template <typename T>
void tile_gemm(int m, int n, int k, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t ldb, T* C,
               int64_t ldc, bool accumulate, CausalTrim trim = {}) {
#if defined(MT_HAVE_VECF)
  if constexpr (std::is_same_v<T, float>) {
    static constexpr auto kMicro = micro_table(std::make_integer_sequence<int, kMicroRows>{});
    constexpr int kCols = kMicroVecs * kLanes;
    for (int j0 = 0; j0 < n; j0 += kCols) {
      const int cols = std::min(kCols, n - j0);
      for (int i0 = 0; i0 < m; i0 += kMicroRows) {
        const int rows = std::min(kMicroRows, m - i0);
        // Columns [c0, c1) of this chunk and k terms [p0, p1) the block needs.
        int64_t c0 = 0, c1 = cols, p0 = 0, p1 = k;
        const int64_t first = i0 + trim.offset, last = i0 + rows - 1 + trim.offset;  // rows' bounds
        switch (trim.kind) {
          case CausalTrim::kNone: break;
          case CausalTrim::kColsFrom: c0 = std::clamp<int64_t>((first - j0) / kLanes * kLanes, 0, cols); break;
          case CausalTrim::kColsBelow: c1 = std::clamp<int64_t>(last - j0, 0, cols); break;
          case CausalTrim::kKFrom: p0 = std::clamp<int64_t>(first, 0, k); break;
          case CausalTrim::kKBelow: p1 = std::clamp<int64_t>(last, 0, k); break;
        }
        if (c0 >= c1) continue;
        const int nv = static_cast<int>((c1 - c0 + kLanes - 1) / kLanes);
        const int width = static_cast<int>(std::min<int64_t>(cols - c0, int64_t(nv) * kLanes));
        const Tail tail = tail_of(width - kLanes * (nv - 1));
        kMicro[rows - 1][nv - 1](static_cast<int>(std::max<int64_t>(0, p1 - p0)), A + i0 * a_rs + p0 * a_cs, a_rs,
                                 a_cs, B + p0 * ldb + j0 + c0, ldb, C + i0 * ldc + j0 + c0, ldc, tail, accumulate);
      }
    }
    return;
  }
#endif
  (void)trim;
  tile_gemm_loops(m, n, k, A, a_rs, a_cs, B, ldb, C, ldc, accumulate);
}

#if defined(MT_HAVE_VECF)
// e^x of a softmax argument (a score minus its row's maximum or
// log-sum-exp: at most a rounding above 0, so never near overflow), with
// the bits of fast_exp (elementwise.h: the same exp_mantissa, so the same
// roundings and contractions) but without the branches such arguments
// never take: below -87.3 (-inf: a masked pair) exactly 0, NaN propagates,
// and 2^k needs no split (k >= -126: p 2^k is the one rounding of
// p 2^k1 2^k2). About half fast_exp's vector operations: the
// exponentials are the largest cost of the attention tiles after their
// GEMMs. (GCC 12 warns about the `undefined` pass-through operand of
// AVX-512 intrinsics once they inline; GCC bug 105593.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
[[gnu::always_inline]] inline VecF softmax_exp(VecF x) {
  const VecF lo = broadcast(-87.3f);
  const auto below = x < lo;
  const VecF xc = below ? lo : x;  // NaN stays NaN (the comparison is false)
  VecF kr, p;
  exp_mantissa(xc, kr, p);
#if MT_KERNEL_ISA == MT_ISA_AVX512
  const VecF y = _mm512_scalef_ps(p, kr);
#else
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(kr), _mm256_set1_epi32(127)), 23);
  const VecF y = p * _mm256_castsi256_ps(bits);
#endif
  return below ? VecF{} : y;
}
#pragma GCC diagnostic pop
#endif

// p[j] = e^{s[j] - m} in place (exactly 0 where s is -inf, i.e. masked).
// m is finite.
template <typename T>
void exp_row(T* s, int n, T m) {
#if defined(MT_HAVE_VECF)
  if constexpr (std::is_same_v<T, float>) {
    const VecF mv = broadcast(m);
    int j = 0;
    for (; j + kLanes <= n; j += kLanes) store(s + j, softmax_exp(load(s + j) - mv));
    if (j < n) {
      const Tail tail = tail_of(n - j);
      store(s + j, softmax_exp(load(s + j, tail) - mv), tail);
    }
    return;
  }
#endif
#pragma omp simd
  for (int j = 0; j < n; ++j) s[j] = s[j] == kNegInf<T> ? T(0) : exp_t(s[j] - m);
}

// The transposed tile St [nk, ld] (one row per key, one column per query)
// is walked kColChunk columns at a time, every key row in order, so each
// column's running max or sum stays in registers while the rows stream
// past. W = kColChunk for whole chunks (a constant trip count the compiler
// keeps in one or two vectors), W = 0 for the last, narrower one.
constexpr int kColChunk = 16;

template <typename F>
void for_column_chunks(int nq, F&& chunk) {
  int i0 = 0;
  for (; i0 + kColChunk <= nq; i0 += kColChunk) chunk(i0, std::integral_constant<int, kColChunk>{}, kColChunk);
  if (i0 < nq) chunk(i0, std::integral_constant<int, 0>{}, nq - i0);
}

// mcol[i] = max_j St[j][i].
template <typename T>
void max_cols(const T* St, int64_t ld, int nk, int nq, T* mcol) {
  for_column_chunks(nq, [&](int i0, auto w_const, int w_run) {
    constexpr int W = decltype(w_const)::value;
    const int w = W ? W : w_run;
    T m[kColChunk];
    std::fill(m, m + kColChunk, kNegInf<T>);
    for (int j = 0; j < nk; ++j) {
      const T* s = St + j * ld + i0;
#pragma omp simd
      for (int i = 0; i < w; ++i) m[i] = s[i] > m[i] ? s[i] : m[i];
    }
    std::copy(m, m + w, mcol + i0);
  });
}

// St[j][i] = e^{St[j][i] - m[i]} (exactly 0 where -inf, i.e. masked), and
// colsum[i] = sum_j St[j][i] in key order. Columns whose m is -inf are all
// masked.
template <typename T>
void exp_cols(T* St, int64_t ld, int nk, int nq, const T* m, T* colsum) {
#if defined(MT_HAVE_VECF)
  if constexpr (std::is_same_v<T, float>) {
    // kLanes columns at a time, the last ones masked; an all-masked column
    // (m = -inf) subtracts 0 so its -inf entries still give exactly 0.
    auto chunk = [&](int i0, auto whole) {  // whole: plain loads and stores (AVX2's masked ones are slower)
      constexpr bool kWhole = decltype(whole)::value;
      const Tail tail = tail_of(std::min(kLanes, nq - i0));
      auto ld_v = [&](const float* x) { return kWhole ? load(x) : load(x, tail); };
      const VecF mi = ld_v(m + i0);
      const VecF mc = mi == broadcast(kNegInf<float>) ? VecF{} : mi;
      VecF sum{};
      for (int j = 0; j < nk; ++j) {
        float* row = St + j * ld + i0;
        const VecF p = softmax_exp(ld_v(row) - mc);
        if constexpr (kWhole) store(row, p);
        else store(row, p, tail);
        sum += p;
      }
      if constexpr (kWhole) store(colsum + i0, sum);
      else store(colsum + i0, sum, tail);
    };
    int i0 = 0;
    for (; i0 + kLanes <= nq; i0 += kLanes) chunk(i0, std::true_type{});
    if (i0 < nq) chunk(i0, std::false_type{});
    return;
  }
#endif
  for_column_chunks(nq, [&](int i0, auto w_const, int w_run) {
    constexpr int W = decltype(w_const)::value;
    const int w = W ? W : w_run;
    T sum[kColChunk] = {}, mc[kColChunk] = {};
    std::copy(m + i0, m + i0 + w, mc);
    for (int j = 0; j < nk; ++j) {
      T* row = St + j * ld + i0;
#pragma omp simd
      for (int i = 0; i < w; ++i) {
        const T p = row[i] == kNegInf<T> ? T(0) : exp_t(row[i] - mc[i]);
        row[i] = p;
        sum[i] += p;
      }
    }
    std::copy(sum, sum + w, colsum + i0);
  });
}

}  // namespace meshtrain::kernels::MT_ISA_NS::attention_detail
MT_ISA_END
