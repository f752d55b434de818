#include "meshtrain/data/prepare_output.h"

#include <fcntl.h>  // AT_FDCWD
#include <signal.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/core/text.h"
#include "meshtrain/data/dataset.h"

namespace meshtrain::data {
namespace fs = std::filesystem;
namespace {

const std::set<std::string>& dataset_files() {
  static const std::set<std::string> names = {"train.bin", "val.bin", "meta.json"};
  return names;
}

// A file a prepare writes: a dataset file, or a shard's temporary file
// (shard_format.h: NAME.tmp.XXXXXX) that a killed prepare leaves.
bool is_dataset_file(const std::string& name) {
  if (dataset_files().count(name)) return true;
  const size_t tmp = name.find(".tmp.");
  return tmp != std::string::npos && dataset_files().count(name.substr(0, tmp)) &&
         name.size() == tmp + std::string(".tmp.XXXXXX").size();
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  const std::string a = inner.string(), b = outer.string();
  return a == b || (a.size() > b.size() && a.compare(0, b.size(), b) == 0 && a[b.size()] == '/');
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

void check_prepare_output(const std::string& out, bool overwrite, const std::vector<SourceFile>& sources) {
  MT_REQUIRE(DataError, is_valid_utf8(out), "data prepare: --out '", printable(out),
             "' is not valid UTF-8 (it is recorded in meta.json and checkpoints); rename it");
  std::error_code ec;
  const fs::path canon_out = fs::weakly_canonical(fs::absolute(out), ec);
  for (const auto& src : sources) {
    MT_REQUIRE(DataError, is_valid_utf8(src.path), "data prepare: input file name '", printable(src.path),
               "' is not valid UTF-8 (file names are recorded in meta.json); rename the file");
    const fs::path canon_in = fs::weakly_canonical(fs::absolute(src.path), ec);
    MT_REQUIRE(DataError, !is_within(canon_in, canon_out), "data prepare: --out ", out, " is or contains the input ",
               src.path, "; choose an output directory apart from the inputs");
  }
  const auto st = fs::symlink_status(out, ec);
  if (!fs::exists(st)) return;
  MT_REQUIRE(DataError, overwrite, "output directory ", out, " already exists (remove it or pass --overwrite)");
  MT_REQUIRE(DataError, fs::is_directory(st), "--overwrite replaces only a prepared dataset directory; ", out,
             " is not a directory");
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    MT_REQUIRE(DataError, dataset_files().count(name) && e.is_regular_file(ec), "--overwrite replaces only a prepared ",
               "meshtrain dataset; ", out, " holds '", printable(name), "', which is not part of one");
  }
  try {
    read_dataset_meta(out);
  } catch (const DataError& e) {
    MT_THROW(DataError, "--overwrite replaces only a prepared meshtrain dataset; ", out, " is not one (", e.what(), ")");
  }
}

int remove_stale_prepare_temps(const std::string& out) {
  const fs::path target = fs::absolute(out);
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || !e.is_directory(ec)) continue;
    // <out>.tmp.<pid>.XXXXXX
    const std::string rest = name.substr(prefix.size());
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (end == rest.c_str() || *end != '.' || std::strlen(end) != 7 || pid <= 0 || process_alive(pid_t(pid))) continue;
    bool only_dataset_files = true;
    for (const auto& f : fs::directory_iterator(e.path(), ec))
      only_dataset_files = only_dataset_files && is_dataset_file(f.path().filename().string());
    if (!only_dataset_files) continue;  // not ours to delete
    fs::remove_all(e.path(), ec);
    removed += ec ? 0 : 1;
  }
  return removed;
}

std::string make_prepare_temp(const std::string& out) {
  std::string tmpl = out + ".tmp." + std::to_string(::getpid()) + ".XXXXXX";
  MT_REQUIRE(DataError, ::mkdtemp(tmpl.data()) != nullptr, "cannot create a temp directory beside ", out, ": ",
             std::strerror(errno));
  ::chmod(tmpl.c_str(), 0755);  // mkdtemp makes 0700; the published dataset is an ordinary directory
  return tmpl;
}

void publish_prepared(const std::string& tmp, const std::string& out) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(out, ec))) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(tmp, ec);  // the previous dataset now lives at tmp
      return;
    }
    MT_REQUIRE(DataError, errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "cannot replace ", out, ": ",
               std::strerror(errno));
    // No atomic exchange on this file system: move the old one aside first.
    const std::string old = make_prepare_temp(out);
    fs::remove(old, ec);
    fs::rename(out, old, ec);
    MT_REQUIRE(DataError, !ec, "cannot move the existing ", out, " aside: ", ec.message());
    fs::rename(tmp, out, ec);
    if (ec) {
      std::error_code ec2;
      fs::rename(old, out, ec2);  // put the previous dataset back
      MT_THROW(DataError, "cannot rename ", tmp, " to ", out, ": ", ec.message());
    }
    fs::remove_all(old, ec);
    return;
  }
  fs::rename(tmp, out, ec);
  MT_REQUIRE(DataError, !ec, "cannot rename ", tmp, " to ", out, ": ", ec.message());
}

}  // namespace meshtrain::data
