#include "meshtrain/core/threading.h"

#include <unistd.h>

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "meshtrain/core/compute_team.h"

namespace meshtrain {
namespace {

std::string first_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

int affinity_cores() {
  // Masks wider than CPU_SETSIZE (1024) need a dynamically sized set.
  for (int n = 1024; n <= (1 << 16); n *= 4) {
    cpu_set_t* set = CPU_ALLOC(n);
    const size_t bytes = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(bytes, set);
    const int rc = sched_getaffinity(0, bytes, set);
    const int count = rc == 0 ? CPU_COUNT_S(bytes, set) : 0;
    CPU_FREE(set);
    if (rc == 0) return count;
    if (errno != EINVAL) break;
  }
  return int(std::thread::hardware_concurrency());
}

std::optional<int> v1_limit(const std::filesystem::path& dir) {
  std::istringstream q(first_line(dir / "cpu.cfs_quota_us")), p(first_line(dir / "cpu.cfs_period_us"));
  long long quota = 0, period = 0;
  if (!(q >> quota) || !(p >> period) || quota <= 0 || period <= 0) return std::nullopt;
  return std::max(1, int(std::ceil(double(quota) / double(period))));
}

// Runnable threads of the whole machine now, or -1 where /proc/stat says nothing.
int machine_running() {
  std::ifstream in("/proc/stat");
  std::string key;
  long long value = 0;
  while (in >> key) {
    if (key == "procs_running" && in >> value) return int(value);
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

// This process's threads in state R (running or runnable) now.
int own_running() {
  namespace fs = std::filesystem;
  int n = 0;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/self/task", ec)) {
    const std::string stat = first_line(task.path() / "stat");
    const auto close = stat.rfind(')');  // the name may hold spaces and parentheses
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R') ++n;
  }
  return n;
}

CoreLoad sample_core_load() {
  constexpr int kSamples = 5;
  constexpr auto kApart = std::chrono::milliseconds(2);
  std::vector<int> others;
  for (int i = 0; i < kSamples; ++i) {
    if (i) std::this_thread::sleep_for(kApart);
    const int all = machine_running();
    if (all < 0) break;
    others.push_back(std::max(0, all - own_running()));
  }
  const int cores = hardware_cores();
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return {cores, busy_cores(others, cores, cpus > 0 ? int(cpus) : cores)};
}

}  // namespace

double busy_cores(const std::vector<int>& others_running, int cores, int machine_cpus) {
  if (others_running.empty()) return 0;
  const int least = *std::min_element(others_running.begin(), others_running.end());
  return double(least) * double(cores) / double(std::max(cores, machine_cpus));
}

CoreLoad core_load() {
  static const CoreLoad load = sample_core_load();
  return load;
}

std::optional<int> parse_cgroup_cpu_max(const std::string& line) {
  std::istringstream in(line);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  char* end = nullptr;
  const long long q = std::strtoll(quota.c_str(), &end, 10);
  if (*end != '\0' || q <= 0) return std::nullopt;
  return std::max(1, int(std::ceil(double(q) / double(period))));
}

std::optional<int> cgroup_cpu_limit() {
  namespace fs = std::filesystem;
  std::optional<int> best;
  auto take = [&](std::optional<int> v) {
    if (v && (!best || *v < *best)) best = v;
  };
  // /proc/self/cgroup: "0::/path" (v2) or "N:cpu,cpuacct:/path" (v1).
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    fs::path rel = line.substr(b + 1);
    if (controllers.empty()) {  // v2: every ancestor's cpu.max applies
      for (fs::path dir = fs::path("/sys/fs/cgroup") / rel.relative_path();; dir = dir.parent_path()) {
        take(parse_cgroup_cpu_max(first_line(dir / "cpu.max")));
        if (dir == "/sys/fs/cgroup" || !dir.has_parent_path() || dir == dir.parent_path()) break;
      }
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
      for (const char* mount : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
        take(v1_limit(fs::path(mount) / rel.relative_path()));
        take(v1_limit(mount));
      }
    }
  }
  return best;
}

int hardware_cores() {
  static const std::optional<int> quota = cgroup_cpu_limit();  // files read once
  int n = affinity_cores();
  if (quota) n = std::min(n, *quota);
  return std::max(1, n);
}

void set_compute_threads(int n) { omp_set_num_threads(std::max(1, n)); }
int compute_threads() { return team_threads(); }

int threads_for(const CoreLoad& load, int ranks) {
  ranks = std::max(1, ranks);
  const double others = std::max(0.0, load.busy - double(ranks - 1));
  const int idle = std::max(1, load.cores - int(std::lround(others)));
  return std::max(1, idle / ranks);
}

int threads_per_rank(int ranks) { return threads_for(core_load(), ranks); }

}  // namespace meshtrain
