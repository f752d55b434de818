// `meshtrain bench comm`: collective bandwidth and latency (docs/comm.md).
// `meshtrain bench machine`: this machine's profile for `plan --hardware`.
// `meshtrain bench peak`: the per-core peak MFU divides by, measured again
// and cached (train/peak_flops.h).
#pragma once

#include <string>
#include <vector>

namespace meshtrain::app {

struct BenchCommRequest {
  std::string backend = "threads";  // threads | mpi
  int ranks = 2;                    // threads backend
  std::string min_bytes = "4K", max_bytes = "256M";
  int iters = 7;
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast"};
  bool hierarchical = false;        // the hierarchical form beside the flat one
};
// "" when `text` is a message size bench comm accepts (4096, 4K, 16M, 1GiB),
// else what is wrong with it (for the command line's validation).
std::string size_error(const std::string& text);

// Prints the table to stdout.
void bench_comm(const BenchCommRequest& request);

struct BenchMachineRequest {
  std::string out;                // "": the profile on stdout
  int ranks = 0;                  // collectives over this many ranks; 0: the cores (at least 2)
  std::string max_bytes = "64M";  // largest collective message
};
// Measures GEMM rates, copy bandwidth and collectives (plan/machine_bench.h)
// and writes the profile as TOML to `out` (replaced whole, never torn) or
// returns it when `out` is empty. Returns the TOML text.
std::string bench_machine(const BenchMachineRequest& request);

struct BenchPeakRequest {
  std::vector<std::string> dtypes = {"f32", "bf16"};
  int cores = 0;  // cores busy at once; 0: the cores this process may use
};
// Measures the per-core GEMM peak of each dtype with `cores` cores busy,
// replaces the cached entries training reads, and returns what it found.
std::string bench_peak(const BenchPeakRequest& request);

}  // namespace meshtrain::app
