#include "meshtrain/checkpoint/dtype_convert.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

namespace {

bool is_float(DType t) { return is_floating(t); }

double load_float(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::F32: return double(static_cast<const float*>(p)[i]);
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::F16: return double(float(static_cast<const f16*>(p)[i]));
    default: return double(float(static_cast<const bf16*>(p)[i]));
  }
}

// A double rounded to a 16-bit float once: first to float toward zero with
// a sticky low bit (round to odd), then to nearest even. float keeps at least
// 13 more bits than bf16 or f16, so this equals direct rounding (double ->
// float -> 16 bits would round twice).
float round_to_odd_float(double v) {
  float f = float(v);
  if (std::isfinite(f) && double(f) != v) {
    if (std::abs(double(f)) > std::abs(v)) f = std::nextafter(f, 0.0f);
    f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
  }
  return f;
}

void store_float(void* p, DType t, size_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = float(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::F16: static_cast<f16*>(p)[i] = f16(round_to_odd_float(v)); break;
    default: static_cast<bf16*>(p)[i] = bf16(round_to_odd_float(v)); break;
  }
}

}  // namespace

bool convertible(DType from, DType to) { return from == to || is_float(from) == is_float(to); }

void convert(const void* src, DType from, void* dst, DType to, size_t n) {
  MT_CHECK(convertible(from, to), "convert ", dtype_name(from), " -> ", dtype_name(to));
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(from));
    return;
  }
  if (is_float(from)) {
    for (size_t i = 0; i < n; ++i) store_float(dst, to, i, load_float(src, from, i));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t v = from == DType::I32 ? int64_t(static_cast<const int32_t*>(src)[i]) : static_cast<const int64_t*>(src)[i];
    if (to == DType::I32) {
      MT_REQUIRE(CheckpointError, v >= INT32_MIN && v <= INT32_MAX, "value ", v, " does not fit i32");
      static_cast<int32_t*>(dst)[i] = int32_t(v);
    } else {
      static_cast<int64_t*>(dst)[i] = v;
    }
  }
}

}  // namespace meshtrain::checkpoint
