#include "meshtrain/core/threading.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

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

}  // namespace

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
int compute_threads() { return omp_get_max_threads(); }
int threads_per_rank(int ranks) { return std::max(1, hardware_cores() / std::max(1, ranks)); }

}  // namespace meshtrain
