#include "meshtrain/train/slurm_allocation.h"

#include <cctype>

#include "meshtrain/core/error.h"

namespace meshtrain::train {
namespace {

constexpr int kMaxCount = 1 << 20;

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// The pieces of `list` between commas that are not inside brackets.
std::vector<std::string> split_outside_brackets(const std::string& list, const std::string& what) {
  std::vector<std::string> items(1);
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    MT_REQUIRE(ConfigError, depth == 0 || depth == 1, what, " '", list, "': unbalanced brackets");
    if (c == ',' && depth == 0) items.emplace_back();
    else items.back() += c;
  }
  MT_REQUIRE(ConfigError, depth == 0, what, " '", list, "': unbalanced brackets");
  return items;
}

// "0-2,5" inside one bracket group, zero padded to each range's first number.
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= ranges.size()) {
    size_t end = ranges.find(',', begin);
    if (end == std::string::npos) end = ranges.size();
    const std::string range = ranges.substr(begin, end - begin);
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    MT_REQUIRE(ConfigError, all_digits(lo) && all_digits(hi) && std::stol(lo) <= std::stol(hi) &&
                                std::stol(hi) - std::stol(lo) < kMaxCount,
               "the Slurm host list '", list, "': '", range, "' is not a range such as 0-3 or 07");
    for (long n = std::stol(lo); n <= std::stol(hi); ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(digits);
    }
    begin = end + 1;
  }
  return out;
}

// One host pattern ("rack[0-1]-n[1-2]"), its leftmost bracket group first.
void expand_pattern(const std::string& pattern, const std::string& list, std::vector<std::string>& out) {
  const size_t open = pattern.find('[');
  if (open == std::string::npos) {
    out.push_back(pattern);
    return;
  }
  const size_t close = pattern.find(']', open);
  const std::string head = pattern.substr(0, open), tail = pattern.substr(close + 1);
  for (const auto& n : expand_ranges(pattern.substr(open + 1, close - open - 1), list)) {
    expand_pattern(head + n + tail, list, out);
    MT_REQUIRE(ConfigError, out.size() <= size_t(kMaxCount), "the Slurm host list '", list, "' names too many hosts");
  }
}

}  // namespace

int SlurmAllocation::tasks() const {
  int n = 0;
  for (const auto& node : nodes) n += node.slots;
  return n;
}

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const auto& item : split_outside_brackets(list, "the Slurm host list")) {
    MT_REQUIRE(ConfigError, !item.empty() && item.front() != '[', "the Slurm host list '", list,
               "' has an empty host name");
    expand_pattern(item, list, hosts);
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& list) {
  std::vector<int> tasks;
  for (const auto& item : split_outside_brackets(list, "SLURM_TASKS_PER_NODE")) {
    const size_t paren = item.find("(x");
    const std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      MT_REQUIRE(ConfigError, item.back() == ')', "SLURM_TASKS_PER_NODE '", list, "': '", item,
                 "' is not of the form 2 or 2(x3)");
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    MT_REQUIRE(ConfigError, all_digits(count) && all_digits(repeat) && std::stoi(count) <= kMaxCount &&
                                std::stoi(repeat) >= 1 && tasks.size() + size_t(std::stoi(repeat)) <= size_t(kMaxCount),
               "SLURM_TASKS_PER_NODE '", list, "': '", item, "' is not of the form 2 or 2(x3)");
    tasks.insert(tasks.end(), size_t(std::stoi(repeat)), std::stoi(count));
  }
  return tasks;
}

std::optional<SlurmAllocation> slurm_allocation(const EnvironmentLookup& env) {
  const char* job = env("SLURM_JOB_ID");
  if (!job || !*job) return std::nullopt;
  SlurmAllocation a;
  a.job_id = job;
  const char* nodelist = env("SLURM_JOB_NODELIST");
  const char* per_node = env("SLURM_TASKS_PER_NODE");
  MT_REQUIRE(ConfigError, nodelist && *nodelist && per_node && *per_node, "SLURM_JOB_ID=", a.job_id,
             " says this runs in a Slurm allocation, but SLURM_JOB_NODELIST or SLURM_TASKS_PER_NODE is not set: run "
             "`meshtrain launch` in the batch script (sbatch) or an salloc shell, or unset SLURM_JOB_ID");
  const std::vector<std::string> hosts = expand_hostlist(nodelist);
  const std::vector<int> tasks = expand_tasks_per_node(per_node);
  MT_REQUIRE(ConfigError, hosts.size() == tasks.size(), "the Slurm allocation of job ", a.job_id, " names ",
             hosts.size(), " node(s) (SLURM_JOB_NODELIST=", nodelist, ") but tasks for ", tasks.size(),
             " (SLURM_TASKS_PER_NODE=", per_node, ")");
  for (size_t i = 0; i < hosts.size(); ++i)
    if (tasks[i] > 0) a.nodes.push_back({hosts[i], tasks[i]});
  MT_REQUIRE(ConfigError, !a.nodes.empty(), "the Slurm allocation of job ", a.job_id,
             " has no tasks (SLURM_TASKS_PER_NODE=", per_node, "): ask sbatch for them (--ntasks-per-node)");
  if (const char* step = env("SLURM_STEP_NUM_TASKS"); step && env("SLURM_STEP_ID")) a.step_tasks = std::atoi(step);
  return a;
}

}  // namespace meshtrain::train
