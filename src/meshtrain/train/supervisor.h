// Restarting a failed job from its latest complete checkpoint
// (docs/math.md, "Rule: failure is a group event": an explicit
// group-wide restart path). When a rank dies or a collective fails,
// every rank stops with the named error; with comm.restart_on_failure
// the job then starts again, at most comm.max_restarts times:
//   - threads backend: in this process (train_main loops over launches);
//   - mpirun (srun): the job is gone, so `meshtrain launch` runs it again
//     (relaunch_mpi) and tells the new job which restart it is through the
//     environment (MESHTRAIN_RESTART, MESHTRAIN_RESTART_REASON).
// Each restart is logged on the console and as a metrics event with the
// work lost (steps run after the checkpoint it resumed from).
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace meshtrain::train {

struct RestartInfo {
  int index = 0;  // 0: the first start; k: the k-th restart
  int max = 0;
  std::string reason;  // the failure that caused it
  // Elastic membership (elastic.h): "4 ranks: dp=4, grad_accum=1 -> 2 ranks:
  // dp=2, grad_accum=2" when this launch runs at another layout than the
  // last; a launch that grows back at a step boundary is no restart (index
  // unchanged, reason empty).
  std::string layout_change;
  // When the supervisor saw the last launch end (seconds since the epoch;
  // 0: unknown): the resumed launch records the time it took to be ready
  // to train again (recovery_s).
  double ended_at_s = 0;
};

// Seconds since the epoch, for RestartInfo::ended_at_s.
double wall_clock_s();

// The restart this process is, as set by a relaunching launcher.
RestartInfo restart_info_from_environment();

// Failures that a restart can get past (a dead rank, a collective that
// failed or timed out, an I/O error while saving), as opposed to ones that
// would fail again the same way (bad config or data, a run that cannot
// make progress).
bool restartable(const std::exception& e);

struct LaunchJob {
  std::vector<std::string> mpirun;  // the launcher: {"mpirun", "-np", "2"}, {"srun", "--mpi=pmix", ...}
  std::vector<std::string> command;  // the job: {self, "train", CONFIG, ...}
  int max_restarts = 0;
  std::string stop_file;  // absolute; where SIGINT/SIGTERM are relayed to the job
  // Absolute; where a rank records that it aborts the job
  // (MESHTRAIN_ABORT_FILE). mpirun does not return while a node that
  // stopped answering holds its daemon, so kAbortGrace after the record
  // appears, mpirun's process group is killed.
  std::string abort_file;
  // Ranks on other hosts do not inherit this process's environment: pass
  // every MESHTRAIN_* variable to mpirun as `-x NAME` (a hostfile job).
  bool export_environment = false;
  // After a failed launch: what is known about the cause beyond mpirun's
  // exit code (a lost node); printed and passed on as the restart reason.
  std::function<std::string()> diagnose;
  // Before a relaunch: waits until the job can start again (the hosts of a
  // hostfile answer).
  std::function<void()> before_relaunch;
  // Elastic jobs (elastic.h): the job to run next, before each relaunch
  // after a failure (after_failure) and when the job ended with
  // kRelayoutExitCode to continue at another layout: `next` is the job as
  // first given, to be set to the new layout (-np, the layout's overrides).
  // Returns the change ("" when none), passed on as MESHTRAIN_LAYOUT_CHANGE.
  std::function<std::string(LaunchJob& next, bool after_failure)> relayout;
};

// The exit code of an elastic job that saved its state at a step boundary
// to continue at another layout (RunEnd::Regrow); no failure.
inline constexpr int kRelayoutExitCode = 75;

// Runs `mpirun ... command` until it succeeds or max_restarts relaunches
// are used; returns the last exit code (128 + signal if it was killed). A
// fault rule in MESHTRAIN_FAULT applies to the first launch only.
// mpirun runs in a process group of its own with stdin from /dev/null, so
// a terminal's Ctrl-C reaches only this supervisor, and gets SIGTERM if the
// supervisor dies (no orphaned job). A first SIGINT or SIGTERM is relayed:
// its number is written to `stop_file` (MESHTRAIN_STOP_FILE in the job's
// environment), rank 0 reads it after the step in progress, and the job
// saves and exits as on a signal of its own; no restart follows. A second
// one sends SIGTERM to mpirun, which ends the job at once.
int relaunch_mpi(const LaunchJob& job);

inline constexpr int kAbortGraceSeconds = 5;

}  // namespace meshtrain::train
