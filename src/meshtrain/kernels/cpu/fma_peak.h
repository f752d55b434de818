// Peak FMA throughput of this machine, measured with a register-only loop
// (no memory traffic), so benchmarks and the training progress line can
// report a fraction of it (model FLOPs utilization).
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

// GFLOP/s (one FMA = 2 FLOPs) with `threads` OpenMP threads, fp32, at the
// widest vector ISA compiled in (AVX-512, else AVX2/FMA, else scalar); best
// of 3 runs of `iters` iterations per thread (20M: ~0.1 s; 2M is enough for
// a progress display).
double measure_fma_peak_gflops(int threads, int64_t iters = 20'000'000);

}  // namespace meshtrain::kernels
