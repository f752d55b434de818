// Row gathers and scatters of the mixture-of-experts layer (model/moe_layer.h):
// tokens to their experts' contiguous row blocks and back. Each call walks
// its index list in the given order, one row at a time (the vector runs
// along the row), so a destination row that receives several contributions
// sums them in list order — the (token, slot) order of the combine — on any
// thread count.
#pragma once

#include <cstdint>
#include <cstring>

namespace meshtrain::kernels {

// dst[i] = src[rows[i]] for i < count; rows of `row_bytes` bytes.
inline void gather_rows_bytes(const void* src, const int32_t* rows, int64_t count, int64_t row_bytes, void* dst) {
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(static_cast<char*>(dst) + i * row_bytes, static_cast<const char*>(src) + rows[i] * row_bytes,
                size_t(row_bytes));
}

// dst[dst_rows[i]] += w[i] * src[src_rows[i]] for i < count, in order (w null: 1).
template <typename T>
void add_rows(T* dst, const int32_t* dst_rows, const T* src, const int32_t* src_rows, const double* w,
              int64_t count, int64_t d) {
  for (int64_t i = 0; i < count; ++i) {
    T* y = dst + int64_t(dst_rows[i]) * d;
    const T* x = src + int64_t(src_rows[i]) * d;
    const T a = w ? T(w[i]) : T(1);
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) y[j] += a * x[j];
  }
}

// out[i] = sum_j a[a_rows[i], j] * b[b_rows[i], j] (accumulated in double, j ascending).
template <typename T>
void dot_rows(const T* a, const int32_t* a_rows, const T* b, const int32_t* b_rows, double* out, int64_t count,
              int64_t d) {
  for (int64_t i = 0; i < count; ++i) {
    const T* x = a + int64_t(a_rows[i]) * d;
    const T* y = b + int64_t(b_rows[i]) * d;
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += double(x[j]) * double(y[j]);
    out[i] = s;
  }
}

}  // namespace meshtrain::kernels
