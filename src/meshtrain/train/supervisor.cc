#include "meshtrain/train/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::train {

double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

RestartInfo restart_info_from_environment() {
  RestartInfo r;
  if (const char* v = std::getenv("MESHTRAIN_RESTART")) r.index = std::max(0, std::atoi(v));
  if (const char* v = std::getenv("MESHTRAIN_MAX_RESTARTS")) r.max = std::max(0, std::atoi(v));
  if (const char* v = std::getenv("MESHTRAIN_RESTART_REASON")) r.reason = v;
  if (const char* v = std::getenv("MESHTRAIN_LAYOUT_CHANGE")) r.layout_change = v;
  if (const char* v = std::getenv("MESHTRAIN_LAUNCH_ENDED_AT")) r.ended_at_s = std::atof(v);
  return r;
}

bool restartable(const std::exception& e) {
  return !dynamic_cast<const ConfigError*>(&e) && !dynamic_cast<const DataError*>(&e) &&
         !dynamic_cast<const TrainingError*>(&e);
}

namespace {

volatile sig_atomic_t g_signal = 0;  // the first SIGINT/SIGTERM the supervisor received
volatile sig_atomic_t g_count = 0;

void on_signal(int sig) {
  if (g_count++ == 0) g_signal = sig;
}

// SIGINT/SIGTERM handlers for the supervisor's lifetime; waitpid returns
// EINTR on each (no SA_RESTART).
class RelaySignals {
 public:
  RelaySignals() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~RelaySignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

void write_stop_file(const std::string& path, int sig) {
  const std::string tmp = path + ".tmp";
  if (std::FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(f, "%d\n", sig);
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

// "mpirun" or "srun": what the job's messages call its launcher.
std::string launcher_name(const std::vector<std::string>& argv) {
  const std::string& path = argv.front();
  return path.substr(path.rfind('/') + 1);
}

// Starts argv in a process group of its own (see relaunch_mpi), waits for
// it and relays signals; 128 + signal when it was killed. Ends the group
// when a rank's abort record is older than the grace.
int run_once(const std::vector<std::string>& argv, const std::string& stop_file, const std::string& abort_file) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const std::string name = launcher_name(argv);
  const std::string cannot_run = "meshtrain launch: cannot run " + name + "\n";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  MT_REQUIRE(ConfigError, pid >= 0, "cannot start ", argv[0], ": ", std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the supervisor died already
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::execvp(args[0], args.data());
    [[maybe_unused]] const ssize_t n = ::write(2, cannot_run.data(), cannot_run.size());
    ::_exit(127);
  }
  int status = 0, relayed = 0;
  std::optional<std::chrono::steady_clock::time_point> aborted;
  for (;;) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    MT_REQUIRE(CommError, got == 0 || errno == EINTR, "waiting for ", argv[0], ": ", std::strerror(errno));
    const auto now = std::chrono::steady_clock::now();
    if (!aborted && !abort_file.empty() && ::access(abort_file.c_str(), F_OK) == 0) aborted = now;
    if (aborted && now - *aborted > std::chrono::seconds(kAbortGraceSeconds)) {
      std::fprintf(stderr, "meshtrain launch: a rank aborted the job %d s ago and %s has not ended it (a node "
                   "that stops answering holds it): ending %s\n", kAbortGraceSeconds, name.c_str(), name.c_str());
      ::kill(-pid, SIGKILL);
      aborted = now + std::chrono::hours(24);  // once
    }
    ::usleep(50000);  // a signal cuts it short
    if (g_count == 0 || relayed == g_count) continue;
    if (relayed == 0) {
      write_stop_file(stop_file, g_signal);
      std::fprintf(stderr, "meshtrain launch: %s received: the job finishes its step, saves and exits (send it again "
                   "to end the job at once)\n", g_signal == SIGINT ? "SIGINT" : "SIGTERM");
    } else {
      std::fprintf(stderr, "meshtrain launch: second signal: ending the job now without saving\n");
      ::kill(pid, SIGTERM);  // mpirun (srun) ends its ranks
    }
    relayed = g_count;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// mpirun's arguments that export every MESHTRAIN_* variable set now.
std::vector<std::string> exported_environment() {
  std::vector<std::string> args;
  for (char** e = environ; *e; ++e) {
    const std::string var(*e);
    if (var.rfind("MESHTRAIN_", 0) == 0) args.insert(args.end(), {"-x", var.substr(0, var.find('='))});
  }
  return args;
}

}  // namespace

int relaunch_mpi(const LaunchJob& job) {
  ::setenv("MESHTRAIN_MAX_RESTARTS", std::to_string(job.max_restarts).c_str(), 1);
  ::setenv("MESHTRAIN_STOP_FILE", job.stop_file.c_str(), 1);
  if (!job.abort_file.empty()) ::setenv("MESHTRAIN_ABORT_FILE", job.abort_file.c_str(), 1);
  std::remove(job.stop_file.c_str());  // a request a previous supervisor left
  const RelaySignals relay;
  g_signal = g_count = 0;
  LaunchJob now = job;  // an elastic job's layout changes between launches
  auto relayout = [&](bool after_failure) {
    if (!job.relayout) return;
    now = job;
    const std::string change = job.relayout(now, after_failure);
    if (change.empty()) return ::unsetenv("MESHTRAIN_LAYOUT_CHANGE"), void();
    std::fprintf(stderr, "meshtrain launch: membership: %s\n", change.c_str());
    ::setenv("MESHTRAIN_LAYOUT_CHANGE", change.c_str(), 1);
  };
  ::unsetenv("MESHTRAIN_LAYOUT_CHANGE");
  ::unsetenv("MESHTRAIN_LAUNCH_ENDED_AT");
  relayout(false);
  for (int attempt = 0;;) {
    std::vector<std::string> argv = now.mpirun;
    if (job.export_environment) {
      const auto exported = exported_environment();
      argv.insert(argv.end(), exported.begin(), exported.end());
    }
    argv.insert(argv.end(), now.command.begin(), now.command.end());
    if (!job.abort_file.empty()) std::remove(job.abort_file.c_str());
    const int code = run_once(argv, job.stop_file, job.abort_file);
    ::setenv("MESHTRAIN_LAUNCH_ENDED_AT", std::to_string(wall_clock_s()).c_str(), 1);
    if (!job.abort_file.empty()) std::remove(job.abort_file.c_str());
    if (code == 0 || g_count > 0) {
      std::remove(job.stop_file.c_str());
      return code;  // done, or stopped on request (saved and exited, or ended at once): no restart
    }
    // 130/143: the job was stopped by a signal of its own, which saved and exited.
    if (code == 128 + SIGINT || code == 128 + SIGTERM) return code;
    if (code == kRelayoutExitCode && job.relayout) {  // capacity changed: saved at a step boundary, no failure
      ::unsetenv("MESHTRAIN_RESTART_REASON");
      ::unsetenv("MESHTRAIN_FAULT");
      relayout(false);
      continue;
    }
    ++attempt;
    std::string reason = launcher_name(job.mpirun) + " exited with code " + std::to_string(code);
    if (job.diagnose) {
      const std::string cause = job.diagnose();
      if (!cause.empty()) {
        reason += "; " + cause;
        std::fprintf(stderr, "meshtrain launch: the job failed: %s\n", reason.c_str());
      }
    }
    if (attempt > job.max_restarts) {
      if (job.max_restarts > 0)
        std::fprintf(stderr, "meshtrain launch: the job failed (exit code %d) and all %d restarts are used\n", code,
                     job.max_restarts);
      return code;
    }
    std::fprintf(stderr, "meshtrain launch: %s; restart %d of %d from the latest complete checkpoint\n",
                 reason.c_str(), attempt, job.max_restarts);
    std::fflush(stderr);
    ::setenv("MESHTRAIN_RESTART", std::to_string(attempt).c_str(), 1);
    ::setenv("MESHTRAIN_RESTART_REASON", reason.c_str(), 1);
    ::unsetenv("MESHTRAIN_FAULT");  // an injected fault fires in the first launch only
    if (job.before_relaunch) job.before_relaunch();
    relayout(true);
  }
}

}  // namespace meshtrain::train
