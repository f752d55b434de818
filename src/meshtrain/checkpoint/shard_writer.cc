#include "meshtrain/checkpoint/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/sha256.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/core/rank_activity.h"

namespace meshtrain::checkpoint {

std::string shard_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.bin", rank);
  return buf;
}

void check_pieces(const std::vector<TensorPiece>& pieces, int rank) {
  for (const auto& p : pieces) {
    MT_REQUIRE(CheckpointError, !p.name.empty(), "save: rank ", rank, " passed a piece with an empty tensor name");
    MT_REQUIRE(CheckpointError, box_inside(p.box, p.global_shape), "save: rank ", rank, " piece of '", p.name,
               "' has box ", p.box.str(), " outside its global shape ", p.global_shape.str());
    MT_REQUIRE(CheckpointError, p.data != nullptr, "save: rank ", rank, " piece of '", p.name, "' has no data");
  }
}

LocalShard write_rank_shard(const std::filesystem::path& dir, int rank, const std::vector<TensorPiece>& pieces,
                            const SaveOptions& options, const std::atomic<bool>* cancel) {
  check_pieces(pieces, rank);
  LocalShard out;
  out.file.path = shard_file_name(rank);
  const std::string path = (dir / out.file.path).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  MT_REQUIRE(CheckpointError, fd >= 0, "cannot create shard file ", path, ": ", std::strerror(errno));
  std::map<std::string, size_t> index;  // tensor name -> position in out.tensors
  uint64_t offset = 0;
  try {
    for (const auto& p : pieces) {
      if (options.before_piece) options.before_piece(rank, p.name);
      fault::point("save.piece", rank);
      activity::mark("checkpoint save");  // a long save is progress, not a hang (core/rank_activity.h)
      const size_t bytes = size_t(p.box.numel()) * dtype_size(p.dtype);
      // Hash and write in chunks so each chunk is still in cache when written.
      constexpr size_t kChunk = size_t(4) << 20;
      Sha256 h;
      const char* src = static_cast<const char*>(p.data);
      for (size_t done = 0; done < bytes; done += kChunk) {
        MT_REQUIRE(CheckpointError, !(cancel && cancel->load()), "save cancelled: another rank failed");
        const size_t n = std::min(kChunk, bytes - done);
        h.update(src + done, n);
        write_all(fd, src + done, n, path);
      }
      auto [it, fresh] = index.try_emplace(p.name, out.tensors.size());
      if (fresh) out.tensors.push_back({p.name, p.global_shape, p.dtype, {}});
      TensorEntry& t = out.tensors[it->second];
      MT_REQUIRE(CheckpointError, t.shape == p.global_shape && t.dtype == p.dtype, "save: rank ", rank,
                 " passed pieces of '", p.name, "' with different shapes or dtypes");
      t.pieces.push_back({p.box, out.file.path, offset, uint64_t(bytes), h.hex_digest()});
      offset += bytes;
    }
    fsync_fd(fd, path);
    fault::point("save.written", rank);
  } catch (...) {
    ::close(fd);
    throw;
  }
  MT_REQUIRE(CheckpointError, ::close(fd) == 0, "close of ", path, " failed: ", std::strerror(errno));
  out.file.bytes = offset;
  return out;
}

}  // namespace meshtrain::checkpoint
