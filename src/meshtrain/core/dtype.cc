#include "meshtrain/core/dtype.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  MT_THROW(InternalError, "unknown dtype ", int(t));
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  MT_THROW(InternalError, "unknown dtype ", int(t));
}

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64})
    if (dtype_name(t) == name) return t;
  MT_THROW(ConfigError, "unknown dtype '", name, "': expected one of f32, f64, bf16, i32, i64");
}

}  // namespace meshtrain
