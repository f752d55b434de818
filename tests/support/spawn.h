// Running a helper program as a child process in tests: posix_spawn of a
// fresh executable (never fork() of a multithreaded test process), extra
// environment variables, output to files, and a wait that kills the child
// after a timeout instead of hanging the test.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace meshtrain::testing {

struct ChildResult {
  bool exited = false;    // normal exit (then `code`)
  int code = -1;
  bool signaled = false;  // killed by a signal (then `signal`)
  int signal = 0;
  bool timed_out = false;  // still running at the timeout: killed by us
  std::string describe() const;
};

struct SpawnOptions {
  std::map<std::string, std::string> env;  // added to (or replacing in) this process's environment
  std::vector<std::string> unset_env;      // removed from it
  std::string stdout_path, stderr_path;    // "" keeps the test's own
  std::chrono::milliseconds timeout{120000};
};

ChildResult run_child(const std::vector<std::string>& argv, const SpawnOptions& options = {});

std::string read_text(const std::string& path);

}  // namespace meshtrain::testing
