// The run directory (metrics.run_dir) and what a run may write in it
// (docs/errors.md: nothing already saved is lost):
//   - never a system directory (/, /etc, /usr, ...) and never a directory
//     that holds other files and is not a meshtrain run (nor a
//     checkpoint.dir of other files), unless metrics.allow_nonempty_run_dir
//     says so;
//   - the metrics file lies inside it and, when it exists, is a meshtrain
//     metrics file: any other file is refused, never truncated or rewritten;
//   - one run at a time: an exclusive lock on RUN_DIR/.meshtrain-lock held
//     for the life of the run (released by the kernel when the process
//     ends, so a crash leaves no stale lock); a second run is refused with
//     the holder's pid, host and start time. The lock file also marks the
//     directory as a meshtrain run.
#pragma once

#include <string>

namespace meshtrain::train {

struct TrainConfig;

inline constexpr const char* kRunLockFile = ".meshtrain-lock";
inline constexpr const char* kRunStopFile = ".meshtrain-stop";  // `launch` relays signals here (supervisor.h)
inline constexpr const char* kRunAbortFile = ".meshtrain-abort";
// An elastic job's capacity, written by a scheduler or an operator before or
// during the run (elastic.h): a run directory may hold it before the run.
inline constexpr const char* kRunCapacityFile = "capacity";  // an MPI rank's abort, for `launch` (supervisor.h)
inline constexpr const char* kHeartbeatDir = ".meshtrain-heartbeat";  // every rank's heartbeat (heartbeat.h)

// ConfigError naming the key and the path when the run may not use its
// directory (see above); the checkpoint directory may not be a system
// directory either. Reads only.
void check_run_directory(const TrainConfig& cfg);

// ConfigError unless `path` is absent, a character device (/dev/null) or a
// regular file that holds meshtrain metrics (its first line a JSON record
// with "event" or "step"): a file a run may append to and rewrite on resume.
void check_metrics_file(const std::string& path);

// True for "/", the top-level shared directories themselves (/home, /tmp,
// ...) and anything under the system's own (/etc, /usr, /proc, ...).
bool is_system_directory(const std::string& path);

// Holds the run directory's lock for its lifetime. The constructor creates
// the directory and throws ConfigError naming the holder when another
// process has it, except the one whose pid is in MESHTRAIN_LOCK_HOLDER
// (`meshtrain launch` takes the lock for the job it supervises).
class RunDirectoryLock {
 public:
  explicit RunDirectoryLock(const std::string& run_dir);
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace meshtrain::train
