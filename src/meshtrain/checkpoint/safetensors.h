// safetensors files: 8-byte little-endian header size N, N bytes of JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}}, then the data (offsets relative to its start). The
// reader enforces the format's rules on untrusted files (header size limit,
// valid UTF-8 JSON, dtype allow-list, shape x dtype size == byte length,
// offsets in bounds, contiguous, without overlap) and throws
// CheckpointError naming the file and the rule.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "meshtrain/core/dtype.h"
#include "meshtrain/core/shape.h"

namespace meshtrain::checkpoint {

inline constexpr uint64_t kMaxSafetensorsHeader = uint64_t(100) << 20;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // sorted by begin
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header size
  const SafetensorsEntry* find(const std::string& name) const;
};

// "F32" <-> DType (allow-list: F32, BF16, F64, I32, I64).
std::string_view safetensors_dtype_name(DType t);
// Validates a header JSON for a data section of `data_bytes` bytes.
SafetensorsHeader parse_safetensors_header(std::string_view json_text, uint64_t data_bytes, const std::string& source);
// Validates a whole in-memory file (size prefix, header, bounds).
SafetensorsHeader parse_safetensors_buffer(const void* data, size_t size, const std::string& source);

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;  // shape.numel() elements
};

// Writes atomically (temp file, fsync, rename). Tensors are stored in the
// given order; names must be unique.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

class SafetensorsReader {
 public:
  static SafetensorsReader open(const std::string& path);  // validates
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws when absent
  // Whole tensor into dst, converting like CheckpointReader::read.
  void read(const std::string& name, void* dst, DType dst_dtype) const;
  std::vector<float> read_f32(const std::string& name) const;

 private:
  SafetensorsReader() = default;
  std::string path_;
  SafetensorsHeader header_;
  int fd_ = -1;
};

}  // namespace meshtrain::checkpoint
