// The peak FLOP/s that MFU divides by (docs/performance.md, "MFU"): the best
// rate of the kernel table's GEMM on one core in the run's compute dtype —
// the per-device peak of `plan`'s machine profiles (peak_tflops of `meshtrain
// bench machine`) — times the cores the run computes on.
//
// It is measured once per CPU model, ISA level, GEMM, dtype and number of
// cores busy at once (kernels/cpu/gemm_peak.h: each core timed by its own CPU
// time, best of many short products, so a loaded machine measures what a
// quiet one does) and kept in $XDG_CACHE_HOME/meshtrain/peak_flops.json
// (~/.cache/meshtrain without XDG_CACHE_HOME); `meshtrain bench peak`
// measures again. A measured rate only bounds the cores' peak from below:
// a step that runs faster than the peak proves it low, so the peak is
// measured again and raised to at least that step's rate (raise_peak), and
// MFU <= 100% by construction.
#pragma once

#include <string>

#include "meshtrain/core/dtype.h"

namespace meshtrain::train {

struct PeakFlops {
  double per_core = 0;  // FLOP/s of one core
  int cores = 1;        // cores the run computes on
  DType dtype = DType::F32;
  std::string origin;   // where per_core comes from, for the log and the run record
  double total() const { return per_core * double(cores); }
};

// Cores a job computes on: every rank's compute threads, on the threads
// backend at most the cores this process may use (its ranks share them);
// under mpirun each rank is taken to have cores of its own.
int job_cores(bool threads_backend, int world_size, int threads_per_rank, int process_cores);

// $XDG_CACHE_HOME/meshtrain/peak_flops.json, or ~/.cache/meshtrain/... ("" when neither is set).
std::string peak_cache_path();
// The cache entry's name: CPU model, ISA level, GEMM, dtype, cores busy at once.
std::string peak_key(DType dtype, int busy_cores);

// The best per-core GEMM rate with `busy_cores` cores computing at once.
double measure_core_peak(DType dtype, int busy_cores);

// The cached per-core peak, or a measurement that is then cached (always
// measured with refresh). busy_cores: how many cores measure at once (those
// of this process the run uses); cores: the whole job's.
PeakFlops peak_flops(DType dtype, int cores, int busy_cores, bool refresh = false);

// After a step ran at `achieved` FLOP/s above peak.total(): the peak measured
// again, at least achieved / cores per core, and cached.
PeakFlops raise_peak(const PeakFlops& peak, int busy_cores, double achieved, int64_t step);

}  // namespace meshtrain::train
