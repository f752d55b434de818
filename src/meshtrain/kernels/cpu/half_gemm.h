// GEMM on f16 inputs with f32 accumulate and output (the fp16 policy's
// matmuls): both operands widened to f32 (exactly) in per-thread scratch
// that grows once and is reused, then the f32 GEMM. Same layout rules as
// gemm.h.
#pragma once

#include <cstdint>

#include "meshtrain/core/dtype.h"

namespace meshtrain::kernels {

void gemm_f16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const f16* A, const f16* B,
              float beta, float* C);

// 16-bit float <-> f32, round to nearest even (NaN stays NaN).
void convert_f32_to_f16(const float* x, uint16_t* y, int64_t n);
void convert_f16_to_f32(const uint16_t* x, float* y, int64_t n);

}  // namespace meshtrain::kernels
