// Covers src/meshtrain/kernels/cpu/fma_peak.cc: the peak the progress line
// and bench-small divide by follows the active ISA level. Timed by the
// thread's CPU time, so other processes on the cores do not move it much;
// the levels are 4x apart in FLOPs per cycle (4-wide mul + add, 8-wide FMA,
// 16-wide FMA), the test asks for 1.5x.
#include "meshtrain/kernels/cpu/fma_peak.h"

#include <gtest/gtest.h>

#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::kernels {
namespace {

double core_peak_at(Isa isa) {
  ScopedIsa scoped(isa);
  return measure_fma_core_peak_gflops(4'000'000);
}

TEST(FmaPeak, WiderLevelsMeasureAHigherPeak) {
  const double scalar = core_peak_at(Isa::kScalar);
  EXPECT_GT(scalar, 0.5) << "GFLOP per core-second";
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 here";
  const double avx2 = core_peak_at(Isa::kAvx2);
  EXPECT_GT(avx2, 1.5 * scalar) << "avx2 " << avx2 << " vs scalar " << scalar;
  EXPECT_GT(measure_fma_peak_gflops(1, 4'000'000), 0.0);
}

}  // namespace
}  // namespace meshtrain::kernels
