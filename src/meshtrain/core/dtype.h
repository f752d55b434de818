// Element types: f32, f64, bf16, f16, i32, i64.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain {

enum class DType : uint8_t { F32, F64, BF16, I32, I64, F16 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", ...
DType parse_dtype(std::string_view name);  // throws ConfigError
bool is_floating(DType t);

// bfloat16 storage type: the upper half of an IEEE f32.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }
  // Round to nearest even; NaN stays (quiet) NaN. Written without a branch
  // so the kernels' `omp simd` loops that write bf16 vectorize it.
  static uint16_t from_float(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
};

// IEEE binary16 storage type (fp16 with loss scaling). Conversions round to
// nearest even, keep subnormals, overflow to inf and keep NaN a NaN.
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::F16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <typename T> inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace meshtrain
