// How much memory this process may still allocate: the tightest of the
// cgroup limit minus the cgroup's usage (containers, job schedulers), the
// kernel's MemAvailable estimate and MESHTRAIN_MEMORY_LIMIT (bytes, to keep
// room for other work or rehearse a smaller machine). Read before a run
// allocates, so a run that cannot fit is refused with figures instead of
// being OOM-killed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace meshtrain {

struct AvailableMemory {
  int64_t bytes = 0;
  std::string source;  // e.g. "cgroup memory.max 3.00 GiB, 1.20 GiB in use" or "MemAvailable"
};

std::optional<AvailableMemory> available_memory();

// The refusal of a command that will hold `need` bytes: ConfigError "the run
// does not fit: WHAT, but only ... is available (SOURCE). REMEDY" when need
// exceeds `available`; a warning line when it uses more than 80% of it; ""
// else. `what` names the figures (per rank, per category).
std::string check_memory_budget(int64_t need, const std::string& what, const AvailableMemory& available,
                                const std::string& remedy);
// check_memory_budget against what this machine has left now (nothing to
// compare with off Linux); the warning goes to `console` when not null.
void check_available_memory(int64_t need, const std::string& what, std::FILE* console, const std::string& remedy);

// "MemAvailable:   12345 kB" lines of /proc/meminfo -> bytes; nullopt if absent.
std::optional<int64_t> parse_meminfo_available(const std::string& meminfo);
// A cgroup v2 memory.max / v1 memory.limit_in_bytes value -> bytes; nullopt
// for "max" or a v1 "unlimited" (a value near 2^63).
std::optional<int64_t> parse_cgroup_memory_limit(const std::string& text);

}  // namespace meshtrain
