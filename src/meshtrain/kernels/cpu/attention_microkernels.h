// Attention micro-kernels: the register-blocked tile GEMM and the
// vectorized exponentials of the online softmax (AVX-512 for f32, plain
// loops otherwise). Internal to attention.cc.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12's AVX-512 headers trip false uninitialized warnings (_mm512_undefined_ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace meshtrain::kernels::attention_detail {

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
inline void tile_gemm<float>(int m, int n, int k, const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t ldb,
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
inline float exp_row<float>(float* s, int n, float m) {
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
inline void exp_cols<float>(float* St, int64_t ld, int nk, int nq, const float* m, float* colsum) {
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

}  // namespace meshtrain::kernels::attention_detail
