// Elementwise helpers. All arrays [n] contiguous. Vectorized with omp simd;
// parallel only above kParallelMin elements.
#include "meshtrain/kernels/cpu/elementwise.h"

#include <cmath>
#include <cstring>
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

template <typename T>
void add_inplace(T* y, const T* x, int64_t n) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  });
}

template <typename T>
void scale_inplace(T* y, T a, int64_t n) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] *= a;
  });
}

template <typename T>
void axpy(T* y, T a, const T* x, int64_t n) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] += a * x[i];
  });
}

template <typename T>
void fill(T* y, T value, int64_t n) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = value;
  });
}

namespace {

// One block in a fixed order: 16 interleaved double partial sums (two zmm of
// lanes, hides the add latency), then a fixed pairwise tree.
template <typename T>
double block_sum_squares(const T* x, int64_t len) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      const double v = double(x[i + l]);
      acc[l] += v * v;
    }
  }
  for (int l = 0; i < len; ++i, ++l) {
    const double v = double(x[i]);
    acc[l] += v * v;
  }
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

}  // namespace

template <typename T>
double sum_squares(const T* x, int64_t n) {
  // Super-chunks of kChunkBlocks blocks: block sums land in a stack array in
  // parallel, then are added serially in index order (no heap, and the result
  // is the same for any thread count).
  constexpr int64_t kChunkBlocks = 512;
  double block_sums[kChunkBlocks];
  double total = 0;
  for (int64_t base = 0; base < n; base += kChunkBlocks * kSumBlock) {
    const int64_t len = std::min(n - base, kChunkBlocks * kSumBlock);
    const int64_t nblocks = (len + kSumBlock - 1) / kSumBlock;
    parallel_range(nblocks, len, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t off = base + k * kSumBlock;
        block_sums[k] = block_sum_squares(x + off, std::min(kSumBlock, n - off));
      }
    });
    for (int64_t k = 0; k < nblocks; ++k) total += block_sums[k];
  }
  return total;
}

template <typename T>
bool all_finite(const T* x, int64_t n) {
  int bad = 0;  // one flag; any thread that sees a non-finite sets it
  parallel_range(n, n, [&](int64_t b, int64_t e) {
    int local = 0;
#pragma omp simd reduction(| : local)
    for (int64_t i = b; i < e; ++i) local |= !std::isfinite(x[i]);
    if (local) {
#pragma omp atomic write
      bad = 1;
    }
  });
  return bad == 0;
}

void convert_f32_to_bf16(const float* x, uint16_t* y, int64_t n) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = bf16::from_float(x[i]);
  });
}

void convert_bf16_to_f32(const uint16_t* x, float* y, int64_t n) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const uint32_t u = uint32_t(x[i]) << 16;
      std::memcpy(&y[i], &u, 4);
    }
  });
}

#define MT_INSTANTIATE(T)                                    \
  template void add_inplace<T>(T*, const T*, int64_t);      \
  template void scale_inplace<T>(T*, T, int64_t);           \
  template void axpy<T>(T*, T, const T*, int64_t);          \
  template void fill<T>(T*, T, int64_t);                    \
  template double sum_squares<T>(const T*, int64_t);        \
  template bool all_finite<T>(const T*, int64_t);
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
