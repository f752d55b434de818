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
  std::string max_bytes = "16M";  // largest collective message
  // A cluster (docs/multi-node.md): the command starts itself under mpirun
  // on every slot of this Open MPI hostfile's hosts, as `meshtrain launch
  // --hostfile` starts a job, through `rsh_agent` (ssh by default).
  std::string hostfile, rsh_agent;
};
// Measures GEMM rates, copy bandwidth and collectives (plan/machine_bench.h)
// on this machine, or on the hosts of `hostfile`, and writes the profile as
// TOML to `out` (replaced whole, never torn; on a file system every host
// shares). Returns what to print: the profile when `out` is empty, else
// "wrote OUT"; "" on the ranks of an mpirun job other than rank 0, and in
// the process that started the job on a hostfile (its rank 0 printed it).
std::string bench_machine(const BenchMachineRequest& request);

struct BenchPeakRequest {
  std::vector<std::string> dtypes = {"f32", "bf16"};
  int cores = 0;  // cores busy at once; 0: the cores this process may use
};
// Measures the per-core GEMM peak of each dtype with `cores` cores busy,
// replaces the cached entries training reads, and returns what it found.
std::string bench_peak(const BenchPeakRequest& request);

}  // namespace meshtrain::app
