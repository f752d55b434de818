// Covers src/meshtrain/kernels/cpu/gemm_peak.cc: the per-core GEMM rate MFU
// divides by is a positive, physically possible rate for f32 and bf16, and
// a larger budget never reports less than the best product it times (the
// best of repeats, not their mean).
#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/core/threading.h"
#include "meshtrain/kernels/cpu/gemm_peak.h"

namespace meshtrain::kernels {
namespace {

TEST(GemmPeak, OneCoreRateIsPositiveAndPossible) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double flops = measure_gemm_core_flops(dt, 96, 128, 256, 0.05);
    EXPECT_TRUE(std::isfinite(flops));
    EXPECT_GT(flops, 1e8) << "below 0.1 GFLOP/s: the timing or the FLOP count is wrong";
    // One core of any x86-64 CPU does at most 64 f32 FMAs (AVX-512, two units)
    // or 128 bf16 pairs per cycle; 6 GHz bounds the clock.
    EXPECT_LT(flops, 2.0 * 256 * 6e9);
  }
}

}  // namespace
}  // namespace meshtrain::kernels
