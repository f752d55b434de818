// Loading a checkpoint written under any layout. open() parses and
// validates the manifest (paths, shapes, dtypes, exact coverage, sizes
// against the actual files) and, by default, verifies the SHA-256 of every
// piece before returning; only then does read() copy anything into caller
// memory. read() takes any box (or flat range) of a logical tensor, which
// may span pieces written by several ranks: each rank of the TARGET layout
// reads exactly what it owns.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meshtrain/checkpoint/manifest.h"

namespace meshtrain::checkpoint {

enum class Verify {
  All,     // open() verifies every piece of every tensor (default)
  OnRead,  // read() verifies the pieces it touches before copying any byte
};

struct OpenOptions {
  Verify verify = Verify::All;
};

class CheckpointReader {
 public:
  // `path` is a step directory (holding manifest.json) or a checkpoint
  // root whose `latest` file names one. Throws CheckpointError.
  static CheckpointReader open(const std::string& path, const OpenOptions& options = {});
  // Step directory `latest` in `root` names; CheckpointError if absent.
  static std::filesystem::path resolve_latest(const std::filesystem::path& root);

  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  const std::filesystem::path& directory() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  int64_t step() const { return manifest_.step; }
  const nlohmann::json& metadata() const { return manifest_.metadata; }
  bool has(const std::string& name) const { return manifest_.find(name) != nullptr; }
  const TensorEntry& tensor(const std::string& name) const;  // throws when absent
  std::vector<std::string> names() const;

  // Throws CheckpointError unless `name` is stored with this shape and dtype.
  void expect(const std::string& name, const Shape& shape, DType dtype) const;

  // Reads `box` of tensor `name` into dst (row-major within the box),
  // converting to dst_dtype (f32/f64/bf16 among themselves, i32/i64 among
  // themselves).
  void read(const std::string& name, const Box& box, void* dst, DType dst_dtype) const;
  // Flat row-major element range [begin, end).
  void read_flat(const std::string& name, int64_t begin, int64_t end, void* dst, DType dst_dtype) const;
  void read_all(const std::string& name, void* dst, DType dst_dtype) const;

  // Digest of every piece (no-op for pieces already verified).
  void verify_all() const;
  // Total stored bytes.
  uint64_t total_bytes() const;

 private:
  struct State;
  CheckpointReader() = default;
  void verify_piece(const TensorEntry& t, const PieceEntry& p) const;
  int fd_of(const std::string& file) const;

  std::filesystem::path dir_;
  Manifest manifest_;
  std::unique_ptr<State> state_;  // open files, verified pieces
};

}  // namespace meshtrain::checkpoint
