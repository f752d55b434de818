// One thread pool: OpenMP (libgomp), which oneDNN also uses, so kernels and
// GEMM never oversubscribe the cores. With the threads backend each rank is
// a thread of its own and gets max(1, cores / ranks) OpenMP threads.
#pragma once

#include <optional>
#include <string>

namespace meshtrain {

// Cores this process may use: the calling thread's CPU affinity mask
// (taskset, cpusets) capped by a cgroup CPU quota (containers), at least 1.
// std::thread::hardware_concurrency() counts the machine's cores instead.
int hardware_cores();
// Sets this thread's OpenMP team size for subsequent parallel regions.
void set_compute_threads(int n);
int compute_threads();
// Compute threads a rank gets when `ranks` share this machine.
int threads_per_rank(int ranks);

// ceil(quota / period) of a cgroup v2 `cpu.max` line ("150000 100000" -> 2);
// nullopt for "max ..." (no quota) or anything unparsable.
std::optional<int> parse_cgroup_cpu_max(const std::string& line);
// The tightest CPU quota of this process's cgroup and its ancestors (v2),
// or of the v1 cpu controller; nullopt when none is set.
std::optional<int> cgroup_cpu_limit();

}  // namespace meshtrain
