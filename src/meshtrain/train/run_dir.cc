#include "meshtrain/train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/manifest.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {
namespace {

namespace fs = std::filesystem;

bool under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

std::string canonical_text(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? fs::absolute(path).lexically_normal().string() : p.string();
}

// A relative path that stays inside the directory it is relative to.
bool stays_inside(const fs::path& p) {
  if (p.empty() || p.is_absolute()) return false;
  for (const auto& part : p.lexically_normal())
    if (part == "..") return false;
  return true;
}

// What a run writes into its directory: a directory holding one of these
// was written by a run (or is being).
bool holds_a_run(const TrainConfig& cfg) {
  const fs::path dir(cfg.metrics.run_dir);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir / kRunLockFile, ec))) return true;
  if (!cfg.metrics.jsonl.empty() && fs::is_regular_file(dir / cfg.metrics.jsonl, ec)) return true;  // checked: ours
  const fs::path ckpt = cfg.checkpoint.resolved_dir(cfg.metrics.run_dir);
  return fs::exists(ckpt / checkpoint::kLatestFile, ec) || !checkpoint::list_complete_checkpoints(ckpt).empty();
}

std::string some_entries(const fs::path& dir) {
  std::string out;
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (n++ == 3) return out + ", ...";
    out += (out.empty() ? "'" : ", '") + e.path().filename().string() + "'";
  }
  return out;
}

std::string holder_description() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[64] = "?";
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  std::string cmd;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  for (std::string arg; std::getline(in, arg, '\0') && cmd.size() < 400;) cmd += (cmd.empty() ? "" : " ") + arg;
  return "pid " + std::to_string(::getpid()) + " on " + host + ", since " + when + ": " + cmd + "\n";
}

std::string read_holder(int fd) {
  char buf[1024];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? size_t(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

// A directory whose one entry is an elastic job's capacity file, written
// before its first run.
bool only_capacity_file(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  return !ec && it != end && it->path().filename() == kRunCapacityFile && ++it == end;
}

}  // namespace

bool is_system_directory(const std::string& path) {
  const std::string p = canonical_text(path);
  for (const char* dir : {"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin",
                          "/sys", "/usr"})
    if (under(p, dir)) return true;
  for (const char* dir : {"/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/tmp", "/var", "/var/tmp"})
    if (p == dir) return true;
  return false;
}

void check_metrics_file(const std::string& path) {
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (path.empty() || !fs::exists(st) || fs::is_character_file(st)) return;
  const char* refuse = "; a run appends to its metrics file and rewrites it when it resumes, so it refuses to touch "
                       "this one. Choose another metrics.jsonl or metrics.run_dir";
  MT_REQUIRE(ConfigError, fs::is_regular_file(st), "metrics file ", path, " exists and is ",
             fs::is_symlink(st) ? "a symbolic link" : fs::is_directory(st) ? "a directory" : "not a regular file",
             refuse);
  std::ifstream in(path, std::ios::binary);
  std::string first;
  std::getline(in, first);
  if (first.empty() && in.eof()) return;  // empty
  if (in.eof() && !first.empty() && first[0] == '{') return;  // a first record torn by a crash
  const nlohmann::json j = nlohmann::json::parse(first, nullptr, /*allow_exceptions=*/false);
  MT_REQUIRE(ConfigError, j.is_object() && (j.contains("event") || j.contains("step")), "metrics file ", path,
             " exists and does not hold meshtrain metrics (its first line is not a JSON record with \"event\" or "
             "\"step\")", refuse);
}

void check_run_directory(const TrainConfig& cfg) {
  const std::string& dir = cfg.metrics.run_dir;
  MT_REQUIRE(ConfigError, !is_system_directory(dir), "metrics.run_dir = '", dir, "' is a system directory (",
             canonical_text(dir), "); a run writes its metrics and checkpoints there: use a directory of its own, "
             "e.g. runs/NAME");
  if (!cfg.checkpoint.dir.empty())
    MT_REQUIRE(ConfigError, !is_system_directory(cfg.checkpoint.dir), "checkpoint.dir = '", cfg.checkpoint.dir,
               "' is a system directory (", canonical_text(cfg.checkpoint.dir),
               "); use a directory of the run's own, or leave it empty for <metrics.run_dir>/checkpoints");
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (fs::exists(st))
    MT_REQUIRE(ConfigError, fs::is_directory(st), "metrics.run_dir = '", dir, "' exists and is not a directory");
  if (!cfg.metrics.jsonl.empty()) {
    const fs::path metrics = fs::path(dir) / cfg.metrics.jsonl;
    MT_REQUIRE(ConfigError, stays_inside(cfg.metrics.jsonl) || fs::is_character_file(metrics, ec), "metrics.jsonl = '",
               cfg.metrics.jsonl, "' leads outside metrics.run_dir = '", dir,
               "': give a file name relative to the run directory (e.g. metrics.jsonl), or \"\" for none");
    check_metrics_file(metrics.string());
  }
  if (cfg.metrics.allow_nonempty_run_dir) return;
  if (fs::exists(st) && !fs::is_empty(dir, ec) && !only_capacity_file(dir))
    MT_REQUIRE(ConfigError, holds_a_run(cfg), "metrics.run_dir = '", dir, "' holds other files (", some_entries(dir),
               ") and no meshtrain run (no ", kRunLockFile, ", metrics file or checkpoints); a run writes its "
               "metrics and checkpoints there. Use a new or empty directory, or set "
               "metrics.allow_nonempty_run_dir = true");
  // A checkpoint root elsewhere: a save clears its .tmp-* directories.
  const fs::path ckpt(cfg.checkpoint.dir);
  if (!cfg.checkpoint.dir.empty() && fs::is_directory(ckpt, ec) && !fs::is_empty(ckpt, ec))
    MT_REQUIRE(ConfigError, fs::exists(ckpt / checkpoint::kLatestFile, ec) ||
                                !checkpoint::list_complete_checkpoints(ckpt).empty(),
               "checkpoint.dir = '", cfg.checkpoint.dir, "' holds other files (", some_entries(ckpt),
               ") and no checkpoints; a save writes step directories there and removes its .tmp-* ones. Use a new "
               "or empty directory, or set metrics.allow_nonempty_run_dir = true");
}

RunDirectoryLock::RunDirectoryLock(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  MT_REQUIRE(ConfigError, !ec, "cannot create metrics.run_dir = '", run_dir, "': ", ec.message());
  const std::string path = (fs::path(run_dir) / kRunLockFile).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  MT_REQUIRE(ConfigError, fd >= 0, "cannot open the run's lock file ", path, ": ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_holder(fd);
    ::close(fd);
    MT_REQUIRE(ConfigError, err == EWOULDBLOCK, "cannot lock ", path, ": ", std::strerror(err));
    const char* supervisor = std::getenv("MESHTRAIN_LOCK_HOLDER");
    if (supervisor && holder.rfind(std::string("pid ") + supervisor + " ", 0) == 0) return;  // our `launch`
    MT_THROW(ConfigError, "metrics.run_dir = '", run_dir, "' is in use by another run (",
             holder.empty() ? "holder unknown" : holder,
             "); two runs in one directory would overwrite each other's checkpoints and metrics. Wait for it to "
             "end, or give this run its own metrics.run_dir");
  }
  const std::string me = holder_description();
  // Best effort: without the description the lock holds all the same.
  [[maybe_unused]] const bool described =
      ::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) == ssize_t(me.size());
  fd_ = fd;
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace meshtrain::train
