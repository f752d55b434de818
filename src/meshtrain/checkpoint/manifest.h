// The checkpoint manifest: per logical tensor its global shape, dtype and the
// stored pieces (box, file, byte range, SHA-256); the shard files with their
// sizes; the caller's metadata verbatim. parse_manifest() is the single entry
// point for untrusted manifest bytes and checks everything that does not need
// the file system (the reader then checks files, sizes and digests).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/box.h"
#include "meshtrain/core/dtype.h"
#include "meshtrain/core/shape.h"

namespace meshtrain::checkpoint {

inline constexpr const char* kFormatName = "meshtrain-checkpoint";
inline constexpr int kFormatVersion = 1;
inline constexpr const char* kManifestFile = "manifest.json";
// "HEX  manifest.json" (sha256sum's format), written beside the manifest
// before the commit and checked before the manifest is parsed: an edited
// manifest (a step count, a data position, swapped piece offsets) is
// refused. Checkpoints written before it have none and load as they did.
inline constexpr const char* kManifestDigestFile = "manifest.json.sha256";
inline constexpr const char* kLatestFile = "latest";
inline constexpr size_t kMaxManifestBytes = size_t(1) << 30;

struct PieceEntry {
  Box box;
  std::string file;  // relative to the checkpoint directory
  uint64_t byte_offset = 0;
  uint64_t byte_length = 0;
  std::string sha256;
};

struct TensorEntry {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  std::vector<PieceEntry> pieces;
  uint64_t nbytes() const { return uint64_t(shape.numel()) * dtype_size(dtype); }
};

struct FileEntry {
  std::string path;  // relative, e.g. "rank-00003.bin"
  uint64_t bytes = 0;
};

struct Manifest {
  int format_version = kFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  std::vector<FileEntry> files;
  std::vector<TensorEntry> tensors;  // sorted by name
  nlohmann::json metadata = nlohmann::json::object();

  const TensorEntry* find(const std::string& name) const;
  const FileEntry* find_file(const std::string& path) const;
  nlohmann::json to_json() const;
};

// Parses and validates; CheckpointError naming `source` and the failed check.
Manifest parse_manifest(std::string_view text, const std::string& source);
// The structural checks parse_manifest runs (also used by the writer before
// it commits, so a bad partition fails at save time, not at load time).
void validate_manifest(const Manifest& m, const std::string& source);
// Syntactic path rule: relative, no "..", no empty or "." component.
void check_relative_path(const std::string& path, const std::string& source);

// dtype names in manifests ("f32", "bf16", ...); CheckpointError when unknown.
DType dtype_from_name(std::string_view name, const std::string& source);

// Piece descriptors as exchanged between ranks before rank 0 merges them.
nlohmann::json pieces_to_json(const std::vector<TensorEntry>& tensors);
std::vector<TensorEntry> pieces_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace meshtrain::checkpoint
