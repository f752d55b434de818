#include "meshtrain/checkpoint/fs_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <stdio.h>  // renameat2

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

std::string step_dir_name(int64_t step) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "step-%08lld", (long long)step);
  return buf;
}

std::string tmp_dir_name(int64_t step) { return std::string(".tmp-").append(step_dir_name(step)); }

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  if (name.size() < 6 || name.compare(0, 5, "step-") != 0 || name.size() > 5 + 18) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    MT_REQUIRE(CheckpointError, w > 0, "write to ", path, " failed: ", std::strerror(errno));
    p += w;
    n -= size_t(w);
  }
}

void pread_all(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t(1) << 30), off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    MT_REQUIRE(CheckpointError, r >= 0, "read of ", path, " failed: ", std::strerror(errno));
    MT_REQUIRE(CheckpointError, r > 0, "read of ", path, " at byte ", offset, ": unexpected end of file (truncated)");
    p += r;
    n -= size_t(r);
    offset += uint64_t(r);
  }
}

void fsync_fd(int fd, const std::string& path) {
  MT_REQUIRE(CheckpointError, ::fsync(fd) == 0, "fsync of ", path, " failed: ", std::strerror(errno));
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MT_REQUIRE(CheckpointError, fd >= 0, "cannot open directory ", dir.string(), " to fsync: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  MT_REQUIRE(CheckpointError, rc == 0, "fsync of directory ", dir.string(), " failed: ", std::strerror(err));
}

void atomic_write_file(const fs::path& dir, const std::string& name,
                       const std::function<void(int fd, const std::string& tmp_path)>& write) {
  const fs::path tmp = dir / ("." + name + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_REQUIRE(CheckpointError, fd >= 0, "cannot create ", tmp.string(), ": ", std::strerror(errno));
  try {
    write(fd, tmp.string());
    fsync_fd(fd, tmp.string());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), (dir / name).c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    MT_THROW(CheckpointError, "cannot rename ", tmp.string(), " to ", (dir / name).string(), ": ", std::strerror(err));
  }
  fsync_dir(dir);
}

void atomic_write_file(const fs::path& dir, const std::string& name, const std::string& text) {
  atomic_write_file(dir, name, [&](int fd, const std::string& tmp) { write_all(fd, text.data(), text.size(), tmp); });
}

std::string read_text_file(const fs::path& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_REQUIRE(CheckpointError, fd >= 0, "cannot open ", path.string(), ": ", std::strerror(errno));
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = errno;
      ::close(fd);
      MT_REQUIRE(CheckpointError, r == 0, "read of ", path.string(), " failed: ", std::strerror(err));
      break;
    }
    out.append(buf, size_t(r));
    if (out.size() > max_bytes) {
      ::close(fd);
      MT_THROW(CheckpointError, path.string(), " is larger than the limit of ", max_bytes, " bytes");
    }
  }
  return out;
}

bool exchange_paths(const fs::path& a, const fs::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  const int err = errno;
  if (err == EINVAL || err == ENOSYS || err == ENOTSUP) return false;
  MT_THROW(CheckpointError, "cannot exchange ", a.string(), " and ", b.string(), ": ", std::strerror(err));
}

std::vector<std::pair<int64_t, fs::path>> list_complete_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto step = parse_step_dir_name(e.path().filename().string());
    // A link is never one of the root's own step directories (reader.h).
    if (step && !e.is_symlink(ec) && e.is_directory(ec) && fs::exists(e.path() / "manifest.json", ec))
      out.push_back({*step, e.path()});
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace meshtrain::checkpoint
