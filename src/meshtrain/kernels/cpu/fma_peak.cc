// Register-only FMA loop: kChains independent accumulators per thread hide
// the FMA latency (4 cycles, 2 pipes on current x86 -> at least 8 chains).
// One copy per kernel ISA level, each compiled for its level (target
// attributes), and the active level's runs (MESHTRAIN_ISA forces it), so a
// benchmark's "fraction of peak" is against the peak of the code it ran.
#include "meshtrain/kernels/cpu/fma_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>

#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::kernels {
namespace {

constexpr int kChains = 12;

// acc = acc * a + b: one FMA per chain and step where the target has FMA
// (GCC contracts it), a mul and an add at the x86-64 baseline. Returns a
// value depending on every accumulator so nothing is optimized away.
#define MT_FMA_LOOP(name, width, target)                                   \
  target float name(int64_t iters, float seed) {                           \
    typedef float vec __attribute__((vector_size(width * sizeof(float)))); \
    vec acc[kChains];                                                      \
    vec a, b;                                                              \
    for (int l = 0; l < width; ++l) {                                      \
      a[l] = 1.0f + 1e-7f * seed;                                          \
      b[l] = 1e-7f;                                                        \
    }                                                                      \
    for (int c = 0; c < kChains; ++c)                                      \
      for (int l = 0; l < width; ++l) acc[c][l] = seed + float(c);         \
    for (int64_t i = 0; i < iters; ++i) {                                  \
      _Pragma("GCC unroll 12") for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b; \
      asm volatile("" : "+x"(a)); /* keep the math in the loop */          \
    }                                                                      \
    float s = 0;                                                           \
    for (int c = 0; c < kChains; ++c)                                      \
      for (int l = 0; l < width; ++l) s += acc[c][l];                      \
    return s;                                                              \
  }

MT_FMA_LOOP(fma_loop_avx512, 16, __attribute__((target("avx512f,fma"))))
MT_FMA_LOOP(fma_loop_avx2, 8, __attribute__((target("avx2,fma"))))
MT_FMA_LOOP(fma_loop_baseline, 4, )
#undef MT_FMA_LOOP

using FmaLoop = float (*)(int64_t, float);

// The active level's loop and its vector width.
FmaLoop active_loop(int* width) {
  const Isa isa = active_isa();
  *width = isa == Isa::kAvx512 ? 16 : isa == Isa::kAvx2 ? 8 : 4;
  return isa == Isa::kAvx512 ? fma_loop_avx512 : isa == Isa::kAvx2 ? fma_loop_avx2 : fma_loop_baseline;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

double measure_fma_core_peak_gflops(int64_t iters) {
  int width = 0;
  const FmaLoop loop = active_loop(&width);
  float sink = loop(iters / 20, 1.0f);  // warm up clocks
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = thread_cpu_seconds();
    sink += loop(iters, float(rep));
    best = std::max(best, 2.0 * width * kChains * double(iters) / (thread_cpu_seconds() - t0) * 1e-9);
  }
  volatile float keep = sink;
  (void)keep;
  return best;
}

double measure_fma_peak_gflops(int threads, int64_t iters) {
  threads = std::max(1, threads);
  int width = 0;
  const FmaLoop loop = active_loop(&width);
  float sink = 0;
  loop(iters / 20, 1.0f);  // warm up clocks
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const float r = loop(iters, float(omp_get_thread_num()));
#pragma omp atomic
      sink += r;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * width * kChains * double(iters) * threads / s * 1e-9);
  }
  volatile float keep = sink;  // the accumulators must look used
  (void)keep;
  return best;
}

}  // namespace meshtrain::kernels
