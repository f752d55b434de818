#include "meshtrain/train/supervisor.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "meshtrain/core/error.h"

extern char** environ;

namespace meshtrain::train {

RestartInfo restart_info_from_environment() {
  RestartInfo r;
  if (const char* v = std::getenv("MESHTRAIN_RESTART")) r.index = std::max(0, std::atoi(v));
  if (const char* v = std::getenv("MESHTRAIN_MAX_RESTARTS")) r.max = std::max(0, std::atoi(v));
  if (const char* v = std::getenv("MESHTRAIN_RESTART_REASON")) r.reason = v;
  return r;
}

bool restartable(const std::exception& e) {
  return !dynamic_cast<const ConfigError*>(&e) && !dynamic_cast<const DataError*>(&e) &&
         !dynamic_cast<const TrainingError*>(&e);
}

namespace {

// posix_spawnp + wait; the child inherits stdio. 128 + signal when killed.
int run_once(const std::vector<std::string>& argv) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  MT_REQUIRE(ConfigError, rc == 0, "cannot start ", argv[0], ": ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int relaunch_mpi(const LaunchJob& job) {
  std::vector<std::string> argv = job.mpirun;
  argv.insert(argv.end(), job.command.begin(), job.command.end());
  ::setenv("MESHTRAIN_MAX_RESTARTS", std::to_string(job.max_restarts).c_str(), 1);
  for (int attempt = 0;; ++attempt) {
    const int code = run_once(argv);
    if (code == 0) return 0;
    // 130/143: the user stopped the job (SIGINT/SIGTERM), which saved and exited.
    if (code == 128 + SIGINT || code == 128 + SIGTERM || attempt >= job.max_restarts) {
      if (attempt >= job.max_restarts && job.max_restarts > 0)
        std::fprintf(stderr, "meshtrain launch: the job failed (exit code %d) and all %d restarts are used\n", code,
                     job.max_restarts);
      return code;
    }
    const std::string reason = "mpirun exited with code " + std::to_string(code);
    std::fprintf(stderr, "meshtrain launch: %s; restart %d of %d from the latest complete checkpoint\n",
                 reason.c_str(), attempt + 1, job.max_restarts);
    std::fflush(stderr);
    ::setenv("MESHTRAIN_RESTART", std::to_string(attempt + 1).c_str(), 1);
    ::setenv("MESHTRAIN_RESTART_REASON", reason.c_str(), 1);
    ::unsetenv("MESHTRAIN_FAULT");  // an injected fault fires in the first launch only
  }
}

}  // namespace meshtrain::train
