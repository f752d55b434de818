// Crash tests: run checkpoint_save_child (save_child.cc) in a child process
// with a fault point armed to SIGKILL it, then check what it left behind.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/reader.h"
#include "support/spawn.h"

namespace meshtrain::testing {

// Saves steps [first, first + count) in a child; `fault` arms
// MESHTRAIN_FAULT there ("" = none). The child's stderr goes to `log`.
inline ChildResult save_in_child(const std::string& root, int64_t first, int64_t count, const std::string& fault,
                                 const std::string& log, bool exchange = true) {
  std::vector<std::string> argv = {MESHTRAIN_SAVE_CHILD, root, std::to_string(first), std::to_string(count)};
  if (!exchange) argv.push_back("--no-exchange");
  SpawnOptions o;
  o.unset_env = {"MESHTRAIN_FAULT"};
  if (!fault.empty()) o.env["MESHTRAIN_FAULT"] = fault;
  o.stderr_path = log;
  o.timeout = std::chrono::seconds(60);
  return run_child(argv, o);
}

// Per fault site, how often a child run reaches it (MESHTRAIN_FAULT=count).
inline std::map<std::string, int64_t> fault_point_counts(const std::string& log) {
  std::map<std::string, int64_t> counts;
  const std::string text = read_text(log);
  const auto line = text.find("meshtrain fault points:");
  if (line == std::string::npos) return counts;
  const std::string rest = text.substr(line, text.find('\n', line) - line);
  const std::regex item(R"(([a-z_.]+)@(-?\d+)=(\d+))");
  for (auto it = std::sregex_iterator(rest.begin(), rest.end(), item); it != std::sregex_iterator(); ++it)
    counts[(*it)[1].str()] += std::stoll((*it)[3].str());
  return counts;
}

// `latest` names a complete checkpoint holding exactly crash_state(step).
inline int64_t expect_latest_consistent(const std::string& root) {
  const checkpoint::CheckpointReader r = checkpoint::CheckpointReader::open(root);
  const int64_t step = r.step();
  EXPECT_EQ(r.metadata()["step"], step);
  for (const auto& t : crash_state(step)) {
    std::vector<char> got(t.bytes.size());
    r.read_all(t.name, got.data(), t.dtype);
    EXPECT_EQ(got, t.bytes) << t.name << " at step " << step;
  }
  return step;
}

inline void expect_no_leftovers(const fs::path& root) {
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    EXPECT_NE(n.rfind(".tmp-", 0), 0u) << e.path();
    EXPECT_NE(n.rfind(".replaced-", 0), 0u) << e.path();
  }
}

}  // namespace meshtrain::testing
