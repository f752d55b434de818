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
};

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
};

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
