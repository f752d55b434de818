// Vectorized elementwise helpers over n contiguous elements.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "meshtrain/core/compute_team.h"
#include "meshtrain/core/dtype.h"

namespace meshtrain::kernels {

template <typename T> void add_inplace(T* y, const T* x, int64_t n);          // y += x
template <typename T> void scale_inplace(T* y, T a, int64_t n);               // y *= a
template <typename T> void axpy(T* y, T a, const T* x, int64_t n);            // y += a x
template <typename T> void fill(T* y, T value, int64_t n);
// Sum of squares in double, in a FIXED order independent of the thread
// count: blocks of kSumBlock elements each summed in a fixed order (16
// interleaved partial sums combined by a fixed tree, so the block vectorizes),
// block sums added in index order. The global grad norm is built from these.
inline constexpr int64_t kSumBlock = 4096;
template <typename T> double sum_squares(const T* x, int64_t n);
// out[i] = sum_squares(x + i * block, min(block, n - i * block)) for every
// block, the blocks spread over the team.
template <typename T> void block_sum_squares(const T* x, int64_t n, int64_t block, double* out);
// True if every element is finite.
template <typename T> bool all_finite(const T* x, int64_t n);
void convert_f32_to_bf16(const float* x, uint16_t* y, int64_t n);
void convert_bf16_to_f32(const uint16_t* x, float* y, int64_t n);

// ---- Helpers shared by the CPU kernels (header-only so they inline). ----

// Below this much work (elements touched) a kernel stays on the calling
// thread: handing out pieces costs more than it saves.
inline constexpr int64_t kParallelMin = 32768;
// A range is cut into at most kPiecesPerThread pieces per thread (so the
// threads that hold a core take over the pieces of one that does not,
// compute_team.h) and none below kPieceWork elements.
inline constexpr int64_t kPiecesPerThread = 8;
inline constexpr int64_t kPieceWork = 8192;

// Whether n items of `work` elements in all are worth the team here.
inline bool worth_a_team(int64_t n, int64_t work) {
  return work >= kParallelMin && n >= 2 && team_threads() > 1;
}

// Calls f(begin, end) on disjoint contiguous ranges covering [0, n), each
// range a piece of the calling thread's team. `work` is the total element
// count touched; small work runs f(0, n) inline. Per-item results must not
// depend on the ranges (they depend on the team size); f must not throw.
template <typename F>
inline void parallel_range(int64_t n, int64_t work, F&& f) {
  if (n <= 0) return;
  if (!worth_a_team(n, work)) {
    f(int64_t(0), n);
    return;
  }
  const int64_t threads = team_threads();
  const int64_t pieces = std::min(n, std::max(threads, std::min(threads * kPiecesPerThread, work / kPieceWork)));
  run_pieces(pieces, [&](int64_t p, int) { f(n * p / pieces, n * (p + 1) / pieces); });
}

// memcpy / memset split over the team in contiguous 4 KiB-aligned byte
// ranges [from, to) (one core's stream is latency-bound well below what
// two reach together).
template <typename F>
void for_byte_ranges(size_t bytes, F&& f) {
  constexpr int64_t kPiece = 4096;
  const int64_t pieces = int64_t((bytes + kPiece - 1) / kPiece);
  parallel_range(pieces, int64_t(bytes / sizeof(float)), [&](int64_t b, int64_t e) {
    f(size_t(b * kPiece), std::min(bytes, size_t(e * kPiece)));
  });
}
inline void parallel_copy_bytes(void* dst, const void* src, size_t bytes) {
  for_byte_ranges(bytes, [&](size_t from, size_t to) {
    std::memcpy(static_cast<char*>(dst) + from, static_cast<const char*>(src) + from, to - from);
  });
}
inline void parallel_zero_bytes(void* dst, size_t bytes) {
  for_byte_ranges(bytes, [&](size_t from, size_t to) { std::memset(static_cast<char*>(dst) + from, 0, to - from); });
}

// An output element of a kernel whose Out is T or uint16_t (bf16 bits of an
// f32 result): as computed, or rounded by bf16::from_float.
template <typename T>
inline void store_out(T* out, T v) {
  *out = v;
}
inline void store_out(uint16_t* out, float v) { *out = bf16::from_float(v); }

// e^xc = p 2^kr: kr = xc / ln 2 rounded to an integer, p the Cephes
// polynomial of the rest. V is float or a vector of floats (the attention
// tiles' softmax_exp): one source, so the same roundings and contractions.
// By reference: a vector by value would change the ABI outside its ISA.
template <typename V>
inline void exp_mantissa(const V& xc, V& kr, V& p) {
  const V k = xc * 1.44269504088896341f;
  kr = (k + 12582912.0f) - 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  V r = xc - kr * 0.693359375f;
  r = r - kr * -2.12194440e-4f;
  p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
}

// exp(x) for float in plain arithmetic so `#pragma omp simd` loops vectorize
// (glibc's vector expf needs -ffast-math). Cephes polynomial, ~1 ulp on
// [-87.3, 88.7]; 0 below, +inf above; NaN propagates.
inline float fast_exp(float x) {
  const float xc = std::min(std::max(x, -87.3f), 88.7f);
  float kr, p;
  exp_mantissa(xc, kr, p);
  // 2^kr through the exponent field; kr in [-126, 128] after the clamp, split
  // in two factors so 2^128 and 2^-126 stay representable.
  const int32_t ki = int32_t(kr);
  const int32_t k1 = ki >> 1, k2 = ki - k1;
  const float s1 = std::bit_cast<float>(uint32_t(k1 + 127) << 23);
  const float s2 = std::bit_cast<float>(uint32_t(k2 + 127) << 23);
  float y = p * s1 * s2;
  if (x < -87.3f) y = 0.0f;  // below FLT_MIN: flush (no denormals)
  if (x > 88.7f) y = std::bit_cast<float>(0x7f800000u);
  return x != x ? x : y;
}

}  // namespace meshtrain::kernels
