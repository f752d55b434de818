// `meshtrain bench comm`: collective bandwidth and latency (docs/comm.md).
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
};
// Prints the table to stdout.
void bench_comm(const BenchCommRequest& request);

}  // namespace meshtrain::app
