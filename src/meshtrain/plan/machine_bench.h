// `meshtrain bench machine`: measures this machine and writes its
// profile (hardware.h) as TOML: GEMM rates per shape class in f32 and
// bf16 (the kernel table's GEMM on one core: a CPU "device" is a core
// and the ranks of a run share the node's cores), the copy bandwidth
// of one core, and alpha-beta fits of docs/math.md (M.20), (M.23) per
// collective on the threads backend (intra-node; the same figures
// stand for inter-node, since the machine has no second node, and the
// file says so). peak_tflops is the best GEMM rate measured per
// dtype: a CPU has no vendor figure to quote, and MFU against it
// reads as a fraction of what this machine's GEMM reaches (training's
// MFU divides by the same figure: train/peak_flops.h). Each GEMM is
// timed by the thread's CPU time (kernels/cpu/gemm_peak.h), so other
// load on the core does not lower it.
#pragma once

#include <cstddef>
#include <string>

namespace meshtrain::plan {

struct MachineBenchOptions {
  int ranks = 0;                          // collectives over this many ranks; 0: the cores (at least 2)
  size_t max_bytes = size_t(64) << 20;    // largest collective message
  int iters = 5;                          // medians of at least this many runs
  double seconds_per_gemm = 0.3;          // time spent on each GEMM shape
};

// The profile as TOML text (comments say how each figure was measured).
std::string bench_machine(const MachineBenchOptions& options);

}  // namespace meshtrain::plan
