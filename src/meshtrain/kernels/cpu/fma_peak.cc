// Register-only FMA loop: kChains independent accumulators per thread hide
// the FMA latency (4 cycles, 2 pipes on current x86 -> at least 8 chains).
#include "meshtrain/kernels/cpu/fma_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

namespace meshtrain::kernels {
namespace {

#if defined(__AVX512F__)
constexpr int kWidth = 16;
#elif defined(__AVX2__) || defined(__AVX__)
constexpr int kWidth = 8;
#else
constexpr int kWidth = 4;
#endif
typedef float vec __attribute__((vector_size(kWidth * sizeof(float))));
constexpr int kChains = 12;

// Returns a value depending on every accumulator so nothing is optimized away.
float fma_loop(int64_t iters, float seed) {
  vec acc[kChains];
  vec a, b;
  for (int l = 0; l < kWidth; ++l) {
    a[l] = 1.0f + 1e-7f * seed;
    b[l] = 1e-7f;
  }
  for (int c = 0; c < kChains; ++c)
    for (int l = 0; l < kWidth; ++l) acc[c][l] = seed + float(c);
  for (int64_t i = 0; i < iters; ++i) {
    // acc = acc * a + b: contracted to one FMA each (-ffp-contract=fast is GCC's default).
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
    // Keep acc in registers but stop the compiler from hoisting the math.
    asm volatile("" : "+x"(a));
  }
  float s = 0;
  for (int c = 0; c < kChains; ++c)
    for (int l = 0; l < kWidth; ++l) s += acc[c][l];
  return s;
}

}  // namespace

double measure_fma_peak_gflops(int threads, int64_t iters) {
  threads = std::max(1, threads);
  float sink = 0;
  fma_loop(iters / 20, 1.0f);  // warm up clocks
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const float r = fma_loop(iters, float(omp_get_thread_num()));
#pragma omp atomic
      sink += r;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * kWidth * kChains * double(iters) * threads / s * 1e-9);
  }
  volatile float keep = sink;  // the accumulators must look used
  (void)keep;
  return best;
}

}  // namespace meshtrain::kernels
