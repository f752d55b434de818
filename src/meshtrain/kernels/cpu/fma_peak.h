// Peak FMA throughput of this machine, measured with a register-only loop
// (no memory traffic), so benchmarks can report a fraction of it. (Training's
// MFU divides by the GEMM peak of gemm_peak.h instead, as `plan` does.)
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

// GFLOP/s (one FMA = 2 FLOPs) with `threads` OpenMP threads, fp32, at the
// active kernel ISA level (isa.h: AVX-512, AVX2 + FMA, or the x86-64
// baseline's 4-wide mul + add); best of 3 runs of `iters` iterations per
// thread (20M: ~0.1 s).
double measure_fma_peak_gflops(int threads, int64_t iters = 20'000'000);

// The same loop on one thread, timed by that thread's CPU time: GFLOP per
// core-second, which other processes sharing the cores do not dilute.
double measure_fma_core_peak_gflops(int64_t iters = 20'000'000);

}  // namespace meshtrain::kernels
