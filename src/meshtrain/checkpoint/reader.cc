#include "meshtrain/checkpoint/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>

#include "meshtrain/checkpoint/consistency.h"
#include "meshtrain/checkpoint/dtype_convert.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/sha256.h"
#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

struct CheckpointReader::State {
  std::map<std::string, int> fds;
  std::mutex mu;
  std::set<std::pair<std::string, uint64_t>> verified;  // (file, byte offset)
  ~State() {
    for (auto& [name, fd] : fds) ::close(fd);
  }
};

CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

std::filesystem::path CheckpointReader::resolve_latest(const std::filesystem::path& root) {
  const fs::path latest = root / kLatestFile;
  struct stat st {};
  MT_REQUIRE(CheckpointError, ::lstat(latest.c_str(), &st) == 0, "no checkpoint in ", root.string(), ": neither ",
             kManifestFile, " nor a '", kLatestFile, "' pointer");
  // The pointer is read, never followed out of the root, and its contents
  // are never echoed: only a validated step name is printed.
  std::error_code ec;
  if (S_ISLNK(st.st_mode)) {
    const fs::path target = fs::weakly_canonical(latest, ec), canon_root = fs::weakly_canonical(root, ec);
    const std::string prefix = canon_root.string() + "/";
    MT_REQUIRE(CheckpointError, !ec && target.string().compare(0, prefix.size(), prefix) == 0, latest.string(),
               " is a symbolic link leading outside ", root.string(), "; refusing to read it");
    MT_REQUIRE(CheckpointError, ::stat(latest.c_str(), &st) == 0, latest.string(), " is a dangling symbolic link");
  }
  MT_REQUIRE(CheckpointError, S_ISREG(st.st_mode), latest.string(), " is not a regular file");
  MT_REQUIRE(CheckpointError, st.st_size <= 4096, latest.string(), " is ", st.st_size,
             " bytes, not a step-NNNNNNNN directory name");
  std::string name = read_text_file(latest, 4096);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r')) name.pop_back();
  MT_REQUIRE(CheckpointError, parse_step_dir_name(name).has_value(), latest.string(), " holds ", name.size(),
             " bytes that are not a step-NNNNNNNN directory name (contents not shown)");
  const fs::path dir = root / name;
  // A step directory is the root's own: never a link to elsewhere.
  for (const fs::path& d : {dir, root / (".replaced-" + name)})
    MT_REQUIRE(CheckpointError, !fs::is_symlink(d, ec), d.string(),
               " is a symbolic link; a checkpoint root holds its step directories itself. Refusing to read it");
  if (fs::exists(dir / kManifestFile, ec)) return dir;
  // A crash while a step was saved again on a file system without atomic
  // exchange: the committed copy waits under this name for the next save.
  const fs::path aside = root / (".replaced-" + name);
  if (fs::exists(aside / kManifestFile, ec)) return aside;
  MT_THROW(CheckpointError, latest.string(), " names ", name, ", which is not a complete checkpoint (no ",
           kManifestFile, ")");
}

namespace {

void check_manifest_digest(const fs::path& dir, const std::string& manifest_text) {
  const fs::path digest_path = dir / kManifestDigestFile;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(digest_path, ec))) return;  // written before manifest digests
  const std::string recorded = read_text_file(digest_path, 4096);
  MT_REQUIRE(CheckpointError, recorded == manifest_digest_line(manifest_text), "checkpoint ", dir.string(), ": ",
             kManifestFile, " does not match its digest in ", kManifestDigestFile,
             ": the manifest was changed after the checkpoint was committed (its step, data position, optimizer "
             "clock or piece offsets cannot be trusted). Restore it, or resume from another checkpoint");
}

// step-NNNNNNNN (or its .replaced- copy) must hold step NNNNNNNN: a renamed
// or copied directory would resume another step than its name says.
void check_step_directory_name(const fs::path& dir, int64_t step) {
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();  // "dir/"
  if (name.rfind(".replaced-", 0) == 0) name = name.substr(std::string(".replaced-").size());
  const auto named = parse_step_dir_name(name);
  MT_REQUIRE(CheckpointError, !named || *named == step, "checkpoint ", dir.string(), ": the directory is named for step ",
             *named, " but its manifest holds step ", step, "; a step directory must not be renamed or copied over "
             "another step's name");
}

}  // namespace

CheckpointReader CheckpointReader::open(const std::string& path, const OpenOptions& options) {
  fs::path dir(path);
  std::error_code ec;
  if (!fs::exists(dir / kManifestFile, ec)) dir = resolve_latest(dir);
  CheckpointReader r;
  r.dir_ = dir;
  r.state_ = std::make_unique<State>();
  const fs::path manifest_path = dir / kManifestFile;
  const std::string manifest_text = read_text_file(manifest_path, kMaxManifestBytes);
  check_manifest_digest(dir, manifest_text);  // first: nothing of an edited manifest is believed
  r.manifest_ = parse_manifest(manifest_text, manifest_path.string());
  check_step_directory_name(dir, r.manifest_.step);
  check_metadata_consistency(r.manifest_, dir.string());

  // Files: inside the directory (after resolving symlinks), regular, and
  // exactly the size the manifest records.
  const fs::path canon_dir = fs::canonical(dir);
  for (const FileEntry& f : r.manifest_.files) {
    const fs::path full = dir / f.path;
    MT_REQUIRE(CheckpointError, fs::exists(fs::symlink_status(full, ec)), "missing shard file ", full.string(),
               " listed in ", manifest_path.string());
    const fs::path canon = fs::weakly_canonical(full, ec);
    const std::string prefix = canon_dir.string() + "/";
    MT_REQUIRE(CheckpointError, !ec && canon.string().compare(0, prefix.size(), prefix) == 0, "shard file ",
               full.string(), " resolves to ", canon.string(),
               ", outside the checkpoint directory (symlink escaping it)");
    MT_REQUIRE(CheckpointError, fs::exists(canon, ec), "missing shard file ", full.string(),
               " (dangling symlink) listed in ", manifest_path.string());
    const int fd = ::open(canon.c_str(), O_RDONLY | O_CLOEXEC);
    MT_REQUIRE(CheckpointError, fd >= 0, "cannot open shard file ", full.string(), ": ", std::strerror(errno));
    r.state_->fds[f.path] = fd;
    struct stat st {};
    MT_REQUIRE(CheckpointError, ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), "shard file ", full.string(),
               " is not a regular file");
    const uint64_t size = uint64_t(st.st_size);
    MT_REQUIRE(CheckpointError, size >= f.bytes, "shard file ", full.string(), " is truncated: ", size,
               " bytes, the manifest records ", f.bytes);
    MT_REQUIRE(CheckpointError, size == f.bytes, "shard file ", full.string(), " has ", size,
               " bytes, the manifest records ", f.bytes, " (unexpected size)");
  }
  if (options.verify == Verify::All) r.verify_all();
  return r;
}

const TensorEntry& CheckpointReader::tensor(const std::string& name) const {
  const TensorEntry* t = manifest_.find(name);
  MT_REQUIRE(CheckpointError, t != nullptr, "checkpoint ", dir_.string(), " has no tensor '", name, "'");
  return *t;
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& t : manifest_.tensors) out.push_back(t.name);
  return out;
}

uint64_t CheckpointReader::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : manifest_.files) n += f.bytes;
  return n;
}

void CheckpointReader::expect(const std::string& name, const Shape& shape, DType dtype) const {
  const TensorEntry& t = tensor(name);
  MT_REQUIRE(CheckpointError, t.shape == shape, "checkpoint ", dir_.string(), ": tensor '", name, "' has shape ",
             t.shape.str(), ", expected ", shape.str(), " (shape mismatch)");
  MT_REQUIRE(CheckpointError, t.dtype == dtype, "checkpoint ", dir_.string(), ": tensor '", name, "' has dtype ",
             dtype_name(t.dtype), ", expected ", dtype_name(dtype), " (dtype mismatch)");
}

int CheckpointReader::fd_of(const std::string& file) const {
  auto it = state_->fds.find(file);
  MT_CHECK(it != state_->fds.end(), "no open file ", file);
  return it->second;
}

void CheckpointReader::verify_piece(const TensorEntry& t, const PieceEntry& p) const {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->verified.count({p.file, p.byte_offset})) return;
  }
  const int fd = fd_of(p.file);
  const std::string path = (dir_ / p.file).string();
  constexpr size_t kChunk = size_t(4) << 20;
  std::vector<char> buf(std::min<uint64_t>(kChunk, p.byte_length));
  Sha256 h;
  for (uint64_t done = 0; done < p.byte_length;) {
    const size_t n = size_t(std::min<uint64_t>(kChunk, p.byte_length - done));
    pread_all(fd, buf.data(), n, p.byte_offset + done, path);
    h.update(buf.data(), n);
    done += n;
  }
  const std::string got = h.hex_digest();
  MT_REQUIRE(CheckpointError, got == p.sha256, "SHA-256 mismatch in shard file ", path, " bytes [", p.byte_offset,
             ", +", p.byte_length, ") (tensor '", t.name, "' piece ", p.box.str(), "): stored data hashes to ", got,
             ", the manifest records ", p.sha256, " (corrupted data or tampered manifest)");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->verified.insert({p.file, p.byte_offset});
}

void CheckpointReader::verify_all() const {
  std::vector<std::pair<const TensorEntry*, const PieceEntry*>> work;
  for (const auto& t : manifest_.tensors)
    for (const auto& p : t.pieces) work.push_back({&t, &p});
  // Hashing is CPU-bound: spread pieces over a few threads.
  const size_t n_threads = std::min<size_t>({work.size(), std::max(1u, std::thread::hardware_concurrency()), 8});
  std::atomic<size_t> next{0};
  std::mutex err_mu;
  std::string first_error;
  auto run = [&] {
    for (size_t i; (i = next.fetch_add(1)) < work.size();) {
      try {
        verify_piece(*work[i].first, *work[i].second);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.empty()) first_error = e.what();
        next = work.size();
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n_threads; ++i) threads.emplace_back(run);
  run();
  for (auto& th : threads) th.join();
  if (!first_error.empty()) throw CheckpointError(first_error);
}

void CheckpointReader::read(const std::string& name, const Box& box, void* dst, DType dst_dtype) const {
  const TensorEntry& t = tensor(name);
  MT_REQUIRE(CheckpointError, box_inside(box, t.shape), "read of '", name, "': box ", box.str(),
             " lies outside the tensor's shape ", t.shape.str());
  MT_REQUIRE(CheckpointError, convertible(t.dtype, dst_dtype), "read of '", name, "': cannot convert ",
             dtype_name(t.dtype), " to ", dtype_name(dst_dtype));
  std::vector<std::pair<const PieceEntry*, Box>> parts;
  for (const auto& p : t.pieces)
    if (auto region = intersect(p.box, box)) parts.push_back({&p, *region});
  // Every digest first: nothing reaches dst unless all touched data is good.
  for (const auto& [p, region] : parts) verify_piece(t, *p);
  const size_t src_elem = dtype_size(t.dtype), dst_elem = dtype_size(dst_dtype);
  char* out = static_cast<char*>(dst);
  std::vector<char> tmp;
  for (const auto& [p, region] : parts) {
    const int fd = fd_of(p->file);
    const std::string path = (dir_ / p->file).string();
    for_each_segment(p->box, box, region, [&](int64_t spos, int64_t dpos, int64_t n) {
      const uint64_t off = p->byte_offset + uint64_t(spos) * src_elem;
      if (t.dtype == dst_dtype) {
        pread_all(fd, out + size_t(dpos) * dst_elem, size_t(n) * src_elem, off, path);
      } else {
        tmp.resize(size_t(n) * src_elem);
        pread_all(fd, tmp.data(), tmp.size(), off, path);
        convert(tmp.data(), t.dtype, out + size_t(dpos) * dst_elem, dst_dtype, size_t(n));
      }
    });
  }
}

void CheckpointReader::read_flat(const std::string& name, int64_t begin, int64_t end, void* dst,
                                 DType dst_dtype) const {
  const TensorEntry& t = tensor(name);
  const std::vector<Box> boxes = flat_range_to_boxes(t.shape, begin, end);
  // Verify every touched piece before the first box is copied.
  for (const Box& b : boxes)
    for (const auto& p : t.pieces)
      if (intersect(p.box, b)) verify_piece(t, p);
  char* out = static_cast<char*>(dst);
  int64_t done = 0;
  for (const Box& b : boxes) {
    read(name, b, out + size_t(done) * dtype_size(dst_dtype), dst_dtype);
    done += b.numel();
  }
}

void CheckpointReader::read_all(const std::string& name, void* dst, DType dst_dtype) const {
  const TensorEntry& t = tensor(name);
  if (t.shape.numel() == 0) return;
  read(name, full_box(t.shape), dst, dst_dtype);
}

}  // namespace meshtrain::checkpoint
