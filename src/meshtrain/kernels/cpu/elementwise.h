// Vectorized elementwise helpers over n contiguous elements.
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

template <typename T> void add_inplace(T* y, const T* x, int64_t n);          // y += x
template <typename T> void scale_inplace(T* y, T a, int64_t n);               // y *= a
template <typename T> void axpy(T* y, T a, const T* x, int64_t n);            // y += a x
template <typename T> void fill(T* y, T value, int64_t n);
// Sum of squares in double, in a FIXED order independent of the thread
// count: blocks of kSumBlock elements each summed serially, block sums added
// in index order. The global grad norm is built from these.
inline constexpr int64_t kSumBlock = 4096;
template <typename T> double sum_squares(const T* x, int64_t n);
// True if every element is finite.
template <typename T> bool all_finite(const T* x, int64_t n);
void convert_f32_to_bf16(const float* x, uint16_t* y, int64_t n);
void convert_bf16_to_f32(const uint16_t* x, float* y, int64_t n);

}  // namespace meshtrain::kernels
