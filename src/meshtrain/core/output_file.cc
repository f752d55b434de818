#include "meshtrain/core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.h"

namespace meshtrain {
namespace {

namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
  return fs::weakly_canonical(fs::absolute(a), ec) == fs::weakly_canonical(fs::absolute(b), ec);
}

}  // namespace

void check_output_file(const std::string& path, const std::vector<std::string>& inputs, bool replace,
                       const char* replace_flag) {
  MT_REQUIRE(ConfigError, !path.empty(), "the output file name is empty");
  for (const auto& in : inputs)
    MT_REQUIRE(ConfigError, !same_file(path, in), "the output ", path, " is the input ", in,
               "; writing it would destroy what it is made from: choose another output file");
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (!fs::exists(st)) return;
  MT_REQUIRE(ConfigError, !fs::is_directory(fs::status(path, ec)), "the output ", path,
             " is a directory; name a file");
  MT_REQUIRE(ConfigError, replace, "the output ", path, " already exists; pass ", replace_flag,
             " to replace it, or choose another file");
}

void write_file_atomically(const std::string& path, std::string_view content) {
  const fs::path out(path);
  std::error_code ec;
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  MT_REQUIRE(DataError, fd >= 0, "cannot create a temporary file beside ", path, ": ", std::strerror(errno));
  const char* p = content.data();
  size_t left = content.size();
  int err = 0;
  while (left > 0 && err == 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) err = w < 0 ? errno : EIO;
    else p += w, left -= size_t(w);
  }
  if (err == 0 && ::fchmod(fd, 0644) != 0) err = errno;
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    MT_THROW(DataError, "cannot write ", path, ": ", std::strerror(err));
  }
}

}  // namespace meshtrain
