// Element conversion used when a reader's destination dtype differs from the
// stored one: f32/f64/bf16 among themselves, i32/i64 among themselves.
#pragma once

#include <cstddef>

#include "meshtrain/core/dtype.h"

namespace meshtrain::checkpoint {

bool convertible(DType from, DType to);
// n elements; src and dst must not overlap.
void convert(const void* src, DType from, void* dst, DType to, size_t n);

}  // namespace meshtrain::checkpoint
