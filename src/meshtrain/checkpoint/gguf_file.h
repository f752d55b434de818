// The GGUF container (version 3), the single-file format llama.cpp and other
// ggml-based runtimes load: a header, typed key/value metadata, tensor
// descriptors, then the tensor data, each tensor aligned (docs/checkpoints.md,
// "GGUF"). Everything is little-endian. This file knows the container and
// the element encodings (f32, f16, bf16, q8_0); which keys and tensor names
// a runtime expects is gguf_export.h's business.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "meshtrain/core/shape.h"

namespace meshtrain::checkpoint {

// ggml's tensor element types that this writer produces (the numbers are
// the format's).
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q8_0 = 8, BF16 = 30 };
const char* to_string(GgmlType t);             // "f32", "f16", "q8_0", "bf16"
GgmlType parse_ggml_type(std::string_view s);  // ConfigError naming the choices

// Q8_0: blocks of 32 values along a row, each an f16 scale d = max|x| / 127
// and 32 signed bytes round(x / d); 34 bytes per block.
inline constexpr int64_t kQ8Block = 32;
std::vector<uint8_t> encode_q8_0(std::span<const float> values);  // size % 32 == 0
std::vector<float> decode_q8_0(std::span<const uint8_t> bytes, int64_t n);
// Bytes of `n` values (n a multiple of the block size for q8_0).
uint64_t ggml_bytes(GgmlType t, int64_t n);

// One metadata value. Arrays hold one element type; integers are stored with
// the width of their C++ type.
using GgufValue = std::variant<uint32_t, int32_t, uint64_t, float, bool, std::string, std::vector<std::string>,
                               std::vector<float>, std::vector<int32_t>>;

struct GgufTensor {
  std::string name;
  Shape shape;  // row-major, as our tensors; written innermost dimension first as GGUF wants
  GgmlType type = GgmlType::F32;
  std::vector<uint8_t> data;  // encoded elements
};

class GgufWriter {
 public:
  // Keys are unique; a repeated key replaces the value.
  void set(const std::string& key, GgufValue value);
  // Encodes f32 `values` (row-major `shape`) as `type`. q8_0 needs the
  // innermost dimension to be a multiple of 32 (CheckpointError otherwise).
  void add_tensor(const std::string& name, const Shape& shape, std::span<const float> values, GgmlType type);
  // Writes the file atomically (a temporary beside it, then a rename).
  void write(const std::string& path) const;
  // The file's bytes (for tests and small files).
  std::string bytes() const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }

 private:
  std::string header() const;  // everything before the tensor data, padded
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensor> tensors_;
};

inline constexpr uint64_t kGgufAlignment = 32;

}  // namespace meshtrain::checkpoint
