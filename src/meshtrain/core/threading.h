// Compute threads: the kernels run on the calling thread's team of
// compute_team.h (pieces handed out dynamically, so a shared core costs its
// share, not a barrier per region); oneDNN's GEMMs run on OpenMP with the
// same team size. Each rank thread of the threads backend has its own team.
// By default a rank gets its share of the cores other processes leave idle
// (docs/performance.md, "Shared cores"); training.threads overrides it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace meshtrain {

// Cores this process may use: the calling thread's CPU affinity mask
// (taskset, cpusets) capped by a cgroup CPU quota (containers), at least 1.
// std::thread::hardware_concurrency() counts the machine's cores instead.
int hardware_cores();
// Sets this thread's team size (compute_team.h and OpenMP) for the kernels
// it calls from now on.
void set_compute_threads(int n);
int compute_threads();
// Compute threads a rank gets by default when `ranks` share this machine:
// threads_for(core_load(), ranks).
int threads_per_rank(int ranks);

// The machine's load as this process saw it once, at its first call: its
// cores (hardware_cores()) and how many of them other work keeps busy.
struct CoreLoad {
  int cores = 1;
  double busy = 0;  // runnable threads of other processes, scaled to our share of the machine
};
CoreLoad core_load();
// The cores other work leaves idle divided among `ranks`, at least 1. Up to
// ranks - 1 busy threads are taken for the job's own other ranks (MPI
// processes starting next to this one), not load.
int threads_for(const CoreLoad& load, int ranks);
// Busy cores from samples of the machine's runnable threads
// (/proc/stat procs_running) less this process's own running threads at
// the same moment: the least sample (a short burst is not load), scaled by
// cores / machine_cpus (a process limited to some CPUs sees its part).
double busy_cores(const std::vector<int>& others_running, int cores, int machine_cpus);

// ceil(quota / period) of a cgroup v2 `cpu.max` line ("150000 100000" -> 2);
// nullopt for "max ..." (no quota) or anything unparsable.
std::optional<int> parse_cgroup_cpu_max(const std::string& line);
// The tightest CPU quota of this process's cgroup and its ancestors (v2),
// or of the v1 cpu controller; nullopt when none is set.
std::optional<int> cgroup_cpu_limit();

}  // namespace meshtrain
