#include "meshtrain/kernels/cpu/half_gemm.h"

#include <immintrin.h>

#include <vector>

#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::kernels {

namespace {

// F16C (every AVX2 CPU has it) converts 8 values per instruction with the
// same rounding as f16::from_float (nearest even, subnormals kept); the
// build targets the x86-64 baseline, so it is chosen at run time, and not
// at the scalar kernel level (MESHTRAIN_ISA=scalar, isa.h).
bool has_f16c() {
  static const bool cpu = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return cpu && active_isa() != Isa::kScalar;
}

__attribute__((target("avx,f16c"))) void to_f16_f16c(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = f16::from_float(x[i]);
}

__attribute__((target("avx,f16c"))) void from_f16_f16c(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = f16::to_float(x[i]);
}

}  // namespace

void convert_f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
    if (has_f16c()) return to_f16_f16c(x + b, y + b, e - b);
    for (int64_t i = b; i < e; ++i) y[i] = f16::from_float(x[i]);
  });
}

void convert_f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  parallel_range(n, n, [&](int64_t b, int64_t e) {
    if (has_f16c()) return from_f16_f16c(x + b, y + b, e - b);
    for (int64_t i = b; i < e; ++i) y[i] = f16::to_float(x[i]);
  });
}

void gemm_f16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const f16* A, const f16* B,
              float beta, float* C) {
  // Grown once per thread; the training loop calls the same shapes every step.
  thread_local std::vector<float> wa, wb;
  const size_t na = size_t(M) * size_t(K), nb = size_t(K) * size_t(N);
  if (wa.size() < na) wa.resize(na);
  if (wb.size() < nb) wb.resize(nb);
  convert_f16_to_f32(reinterpret_cast<const uint16_t*>(A), wa.data(), int64_t(na));
  convert_f16_to_f32(reinterpret_cast<const uint16_t*>(B), wb.data(), int64_t(nb));
  gemm<float>(trans_a, trans_b, M, N, K, alpha, wa.data(), wb.data(), beta, C);
}

}  // namespace meshtrain::kernels
