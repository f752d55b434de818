// Attention micro-kernels: the register-blocked tile GEMM and the
// exponentials of the online softmax. One source for every level: the tile
// GEMM uses the level's vectors (vec.h: 16 lanes on AVX-512, 8 on AVX2) and
// the exponentials are `omp simd` loops over fast_exp, which vectorize at
// the level's width; the scalar level and double run the plain loops.
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

template <typename T>
void tile_gemm(int m, int n, int k, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t ldb, T* C,
               int64_t ldc, bool accumulate) {
#if defined(MT_HAVE_VECF)
  if constexpr (std::is_same_v<T, float>) {
    static constexpr auto kMicro = micro_table(std::make_integer_sequence<int, kMicroRows>{});
    constexpr int kCols = kMicroVecs * kLanes;
    for (int j0 = 0; j0 < n; j0 += kCols) {
      const int cols = std::min(kCols, n - j0);
      const int nv = (cols + kLanes - 1) / kLanes;
      const Tail tail = tail_of(cols - kLanes * (nv - 1));
      for (int i0 = 0; i0 < m; i0 += kMicroRows) {
        const int rows = std::min(kMicroRows, m - i0);
        kMicro[rows - 1][nv - 1](k, A + i0 * a_rs, a_rs, a_cs, B + j0, ldb, C + i0 * ldc + j0, ldc, tail, accumulate);
      }
    }
    return;
  }
#endif
  tile_gemm_loops(m, n, k, A, a_rs, a_cs, B, ldb, C, ldc, accumulate);
}

// p[j] = e^{s[j] - m} in place (exactly 0 where s is -inf, i.e. masked);
// returns sum_j p[j]. m is finite.
template <typename T>
T exp_row(T* s, int n, T m) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const T p = s[j] == kNegInf<T> ? T(0) : exp_t(s[j] - m);
    s[j] = p;
    sum += p;
  }
  return sum;
}

// Transposed tile St [nk, ld] (one row per key, one column per query):
// St[j][i] = e^{St[j][i] - m[i]} (exactly 0 where -inf, i.e. masked), and
// colsum[i] = sum_j St[j][i]. Columns whose m is -inf are all masked.
template <typename T>
void exp_cols(T* St, int64_t ld, int nk, int nq, const T* m, T* colsum) {
  std::fill(colsum, colsum + nq, T(0));
  for (int j = 0; j < nk; ++j) {
    T* row = St + j * ld;
#pragma omp simd
    for (int i = 0; i < nq; ++i) {
      const T p = row[i] == kNegInf<T> ? T(0) : exp_t(row[i] - m[i]);
      row[i] = p;
      colsum[i] += p;
    }
  }
}

}  // namespace meshtrain::kernels::MT_ISA_NS::attention_detail
MT_ISA_END
