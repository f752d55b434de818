// Peak FMA throughput of this machine, measured with a register-only loop
// (no memory traffic), so benchmarks can report a fraction of it.
#pragma once

namespace meshtrain::bench {

// GFLOP/s (one FMA = 2 FLOPs) with `threads` OpenMP threads, fp32, at the
// widest vector ISA compiled in (AVX-512, else AVX2/FMA, else scalar).
double measure_fma_peak_gflops(int threads);

}  // namespace meshtrain::bench
