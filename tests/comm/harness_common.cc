#include <cstring>

#include "harness.h"

namespace meshtrain::comm::testing {

std::vector<char> make_buffer(DType dt, size_t n, const std::function<double(size_t)>& value) {
  std::vector<char> buf(n * dtype_size(dt) + 1);  // +1: data() is never null
  for (size_t i = 0; i < n; ++i) {
    const double v = value(i);
    char* p = buf.data() + i * dtype_size(dt);
    switch (dt) {
      case DType::F32: { float x = float(v); std::memcpy(p, &x, 4); break; }
      case DType::F64: std::memcpy(p, &v, 8); break;
      case DType::BF16: { bf16 x{static_cast<float>(v)}; std::memcpy(p, &x.bits, 2); break; }
      case DType::F16: { f16 x{static_cast<float>(v)}; std::memcpy(p, &x.bits, 2); break; }
      case DType::I32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
      case DType::I64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); break; }
    }
  }
  return buf;
}

double get(DType dt, const std::vector<char>& buf, size_t i) {
  const char* p = buf.data() + i * dtype_size(dt);
  switch (dt) {
    case DType::F32: { float x; std::memcpy(&x, p, 4); return x; }
    case DType::F64: { double x; std::memcpy(&x, p, 8); return x; }
    case DType::BF16: { bf16 x; std::memcpy(&x.bits, p, 2); return double(float(x)); }
    case DType::F16: { f16 x; std::memcpy(&x.bits, p, 2); return double(float(x)); }
    case DType::I32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DType::I64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
  }
  return 0;
}

double round_to(DType dt, double v) {
  auto b = make_buffer(dt, 1, [&](size_t) { return v; });
  return get(dt, b, 0);
}

}  // namespace meshtrain::comm::testing
