#include "meshtrain/core/memory_limits.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/core/memory_tracker.h"

namespace meshtrain {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<int64_t> parse_bytes(const std::string& text) {
  std::istringstream in(text);
  long long v = 0;
  if (!(in >> v) || v < 0) return std::nullopt;
  return int64_t(v);
}

struct Limit {
  int64_t limit = 0, usage = 0;
  std::string file;
};

// The tightest cgroup limit along this process's cgroup path (v2: every
// ancestor's memory.max applies; v1: the memory controller's directory).
std::optional<Limit> cgroup_limit() {
  namespace fs = std::filesystem;
  std::optional<Limit> best;
  auto consider = [&](const fs::path& limit_file, const fs::path& usage_file) {
    const auto limit = parse_cgroup_memory_limit(read_file(limit_file));
    if (!limit) return;
    const int64_t usage = parse_bytes(read_file(usage_file)).value_or(0);
    if (!best || *limit - usage < best->limit - best->usage) best = Limit{*limit, usage, limit_file.string()};
  };
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const fs::path rel = fs::path(line.substr(b + 1)).relative_path();
    if (controllers.empty()) {
      for (fs::path dir = fs::path("/sys/fs/cgroup") / rel;; dir = dir.parent_path()) {
        consider(dir / "memory.max", dir / "memory.current");
        if (dir == "/sys/fs/cgroup" || dir == dir.parent_path()) break;
      }
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      const fs::path dir = fs::path("/sys/fs/cgroup/memory") / rel;
      consider(dir / "memory.limit_in_bytes", dir / "memory.usage_in_bytes");
    }
  }
  return best;
}

}  // namespace

std::optional<int64_t> parse_meminfo_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string key;
  long long kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return int64_t(kb) * 1024;
  return std::nullopt;
}

std::optional<int64_t> parse_cgroup_memory_limit(const std::string& text) {
  if (text.rfind("max", 0) == 0) return std::nullopt;
  const auto v = parse_bytes(text);
  if (!v || *v >= (int64_t(1) << 60)) return std::nullopt;  // v1 "unlimited" is ~2^63 rounded to pages
  return v;
}

std::optional<AvailableMemory> available_memory() {
  std::optional<AvailableMemory> out;
  if (const auto avail = parse_meminfo_available(read_file("/proc/meminfo")))
    out = AvailableMemory{*avail, "MemAvailable in /proc/meminfo"};
  if (const auto cg = cgroup_limit()) {
    const int64_t left = std::max<int64_t>(0, cg->limit - cg->usage);
    if (!out || left < out->bytes)
      out = AvailableMemory{left, "cgroup limit " + format_bytes(cg->limit) + " (" + cg->file + ") minus " +
                                      format_bytes(cg->usage) + " in use"};
  }
  if (const char* cap = std::getenv("MESHTRAIN_MEMORY_LIMIT"))
    if (const auto bytes = parse_bytes(cap); bytes && (!out || *bytes < out->bytes))
      out = AvailableMemory{*bytes, std::string("MESHTRAIN_MEMORY_LIMIT=") + cap};
  return out;
}

std::string check_memory_budget(int64_t need, const std::string& what, const AvailableMemory& available,
                                const std::string& remedy) {
  MT_REQUIRE(ConfigError, need <= available.bytes, "the run does not fit: ", what, ", but only ",
             format_bytes(available.bytes), " is available (", available.source, "). ", remedy);
  if (need * 5 > available.bytes * 4)
    return "warning: " + what + " uses " + std::to_string(int(100.0 * double(need) / double(available.bytes))) +
           "% of the " + format_bytes(available.bytes) + " available (" + available.source + ")";
  return "";
}

void check_available_memory(int64_t need, const std::string& what, std::FILE* console, const std::string& remedy) {
  const auto available = available_memory();
  if (!available) return;  // nothing to compare with (not Linux)
  const std::string warning = check_memory_budget(need, what, *available, remedy);
  if (console && !warning.empty()) std::fprintf(console, "%s\n", warning.c_str());
}

}  // namespace meshtrain
