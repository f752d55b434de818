#include "meshtrain/comm/reduce_kernels.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <emmintrin.h>  // SSE2: part of the x86-64 baseline the build targets

#include "meshtrain/core/error.h"

namespace meshtrain::comm {
namespace {

// 8-16 KiB of accumulator: stays in L1/L2 while R sources stream through.
constexpr size_t kTile = 2048;
// Large outputs bypass the cache (non-temporal stores): no read-for-
// ownership of lines nobody reads soon, and the reduced data does not
// evict the inputs still to be read. 16-byte SSE2 streaming stores: the
// write-combining buffers fill a line either way, and SSE2 needs no
// run-time ISA check.

void store(void* dst, const void* src, size_t bytes, bool stream) {
  if (stream) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    const size_t head = std::min(bytes, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
    std::memcpy(d, s, head);
    d += head, s += head, bytes -= head;
    const size_t n = bytes / 16;
    for (size_t i = 0; i < n; ++i)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16 * i),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * i)));
    std::memcpy(d + 16 * n, s + 16 * n, bytes - 16 * n);
    return;
  }
  std::memcpy(dst, src, bytes);
}

// Non-temporal stores are weakly ordered: fence before peers may read.
void store_fence(bool stream) {
  if (stream) _mm_sfence();
}

template <typename T> struct Acc { using type = T; };
template <> struct Acc<bf16> { using type = float; };
template <> struct Acc<f16> { using type = float; };  // 16-bit types accumulate in f32

template <typename T, typename A>
inline A load(const T* p, size_t i) {
  if constexpr (std::is_same_v<T, bf16>) {
    return std::bit_cast<float>(uint32_t(reinterpret_cast<const uint16_t*>(p)[i]) << 16);
  } else if constexpr (std::is_same_v<T, f16>) {
    return f16::to_float(reinterpret_cast<const uint16_t*>(p)[i]);
  } else {
    return p[i];
  }
}

template <typename T>
void reduce_tiles(const void* const* srcs, int nsrc, void* const* dsts, int ndst, size_t n, ReduceOp op, bool stream) {
  using A = typename Acc<T>::type;
  alignas(64) A acc[kTile];
  alignas(64) T out[kTile];
  for (size_t base = 0; base < n; base += kTile) {
    const size_t m = std::min(kTile, n - base);
    const T* s0 = static_cast<const T*>(srcs[0]) + base;
    for (size_t i = 0; i < m; ++i) acc[i] = load<T, A>(s0, i);
    for (int k = 1; k < nsrc; ++k) {
      const T* s = static_cast<const T*>(srcs[k]) + base;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          for (size_t i = 0; i < m; ++i) acc[i] += load<T, A>(s, i);
          break;
        case ReduceOp::Max:
          for (size_t i = 0; i < m; ++i) { A v = load<T, A>(s, i); acc[i] = v > acc[i] ? v : acc[i]; }
          break;
        case ReduceOp::Min:
          for (size_t i = 0; i < m; ++i) { A v = load<T, A>(s, i); acc[i] = v < acc[i] ? v : acc[i]; }
          break;
      }
    }
    if (op == ReduceOp::Avg)
      for (size_t i = 0; i < m; ++i) acc[i] = acc[i] / A(nsrc);
    const void* tile = acc;
    if constexpr (std::is_same_v<T, bf16>) {
      f32_to_bf16(acc, reinterpret_cast<uint16_t*>(out), m);
      tile = out;
    } else if constexpr (std::is_same_v<T, f16>) {
      for (size_t i = 0; i < m; ++i) out[i].bits = f16::from_float(acc[i]);
      tile = out;
    }
    for (int d = 0; d < ndst; ++d) store(static_cast<T*>(dsts[d]) + base, tile, m * sizeof(T), stream);
  }
  store_fence(stream);
}

}  // namespace

void reduce_to_many(const void* const* srcs, int nsrc, void* const* dsts, int ndst, size_t n, DType dtype,
                    ReduceOp op, int stream_mode) {
  if (n == 0 || ndst == 0) return;
  MT_CHECK(nsrc >= 1, "reduce needs a source");
  const bool stream = stream_mode < 0 ? n * dtype_size(dtype) * size_t(ndst) >= kStreamBytes : stream_mode == 1;
  switch (dtype) {
    case DType::F32: return reduce_tiles<float>(srcs, nsrc, dsts, ndst, n, op, stream);
    case DType::F64: return reduce_tiles<double>(srcs, nsrc, dsts, ndst, n, op, stream);
    case DType::BF16: return reduce_tiles<bf16>(srcs, nsrc, dsts, ndst, n, op, stream);
    case DType::F16: return reduce_tiles<f16>(srcs, nsrc, dsts, ndst, n, op, stream);
    case DType::I32: return reduce_tiles<int32_t>(srcs, nsrc, dsts, ndst, n, op, stream);
    case DType::I64: return reduce_tiles<int64_t>(srcs, nsrc, dsts, ndst, n, op, stream);
  }
}

void copy_to_many(const void* src, void* const* dsts, int ndst, size_t bytes, int stream_mode) {
  constexpr size_t kCopyTile = 64 * 1024;  // L2-resident source tile
  const char* s = static_cast<const char*>(src);
  const bool stream = stream_mode < 0 ? bytes * size_t(ndst) >= kStreamBytes : stream_mode == 1;
  for (size_t base = 0; base < bytes; base += kCopyTile) {
    const size_t m = std::min(kCopyTile, bytes - base);
    for (int d = 0; d < ndst; ++d)
      if (static_cast<char*>(dsts[d]) + base != s + base) store(static_cast<char*>(dsts[d]) + base, s + base, m, stream);
  }
  store_fence(stream);
}

void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(uint32_t(src[i]) << 16);
}

void f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16::from_float(src[i]);
}

void half_to_f32(DType dtype, const uint16_t* src, float* dst, size_t n) {
  if (dtype == DType::BF16) return bf16_to_f32(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = f16::to_float(src[i]);
}

void f32_to_half(DType dtype, const float* src, uint16_t* dst, size_t n) {
  if (dtype == DType::BF16) return f32_to_bf16(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = f16::from_float(src[i]);
}

template <typename T>
static void divide_typed(T* p, size_t n, int d) {
  for (size_t i = 0; i < n; ++i) p[i] = T(p[i] / T(d));
}

void divide_in_place(void* buf, size_t n, DType dtype, int divisor) {
  switch (dtype) {
    case DType::F32: return divide_typed(static_cast<float*>(buf), n, divisor);
    case DType::F64: return divide_typed(static_cast<double*>(buf), n, divisor);
    case DType::I32: return divide_typed(static_cast<int32_t*>(buf), n, divisor);
    case DType::I64: return divide_typed(static_cast<int64_t*>(buf), n, divisor);
    case DType::BF16: {
      auto* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i)
        p[i] = bf16::from_float(std::bit_cast<float>(uint32_t(p[i]) << 16) / float(divisor));
      return;
    }
    case DType::F16: {
      auto* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] = f16::from_float(f16::to_float(p[i]) / float(divisor));
      return;
    }
  }
}

}  // namespace meshtrain::comm
