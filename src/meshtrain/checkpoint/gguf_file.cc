#include "meshtrain/checkpoint/gguf_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/core/dtype.h"
#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

const char* to_string(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "f32";
    case GgmlType::F16: return "f16";
    case GgmlType::Q8_0: return "q8_0";
    case GgmlType::BF16: return "bf16";
  }
  return "?";
}

GgmlType parse_ggml_type(std::string_view s) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0})
    if (s == to_string(t)) return t;
  MT_THROW(ConfigError, "GGUF type '", s, "': expected f32, f16, bf16 or q8_0");
}

uint64_t ggml_bytes(GgmlType t, int64_t n) {
  switch (t) {
    case GgmlType::F32: return uint64_t(n) * 4;
    case GgmlType::F16:
    case GgmlType::BF16: return uint64_t(n) * 2;
    case GgmlType::Q8_0: return uint64_t(n / kQ8Block) * (2 + kQ8Block);
  }
  return 0;
}

std::vector<uint8_t> encode_q8_0(std::span<const float> x) {
  MT_REQUIRE(CheckpointError, x.size() % kQ8Block == 0, "q8_0: ", x.size(), " values are not whole blocks of 32");
  std::vector<uint8_t> out(ggml_bytes(GgmlType::Q8_0, int64_t(x.size())));
  uint8_t* o = out.data();
  for (size_t b = 0; b < x.size(); b += kQ8Block) {
    float amax = 0;
    for (int64_t j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(x[b + size_t(j)]));
    const float d = amax / 127.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t h = f16::from_float(d);
    std::memcpy(o, &h, 2);
    for (int64_t j = 0; j < kQ8Block; ++j) o[2 + j] = uint8_t(int8_t(std::lround(x[b + size_t(j)] * inv)));
    o += 2 + kQ8Block;
  }
  return out;
}

std::vector<float> decode_q8_0(std::span<const uint8_t> bytes, int64_t n) {
  MT_REQUIRE(CheckpointError, n % kQ8Block == 0 && bytes.size() == ggml_bytes(GgmlType::Q8_0, n),
             "q8_0: ", bytes.size(), " bytes do not hold ", n, " values");
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const uint8_t* blk = bytes.data() + b * (2 + kQ8Block);
    uint16_t h;
    std::memcpy(&h, blk, 2);
    const float d = f16::to_float(h);
    for (int64_t j = 0; j < kQ8Block; ++j) out[size_t(b * kQ8Block + j)] = d * float(int8_t(blk[2 + j]));
  }
  return out;
}

namespace {

// GGUF's value type numbers.
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU64 = 10 };

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64)
  out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

template <typename T>
void put_array(std::string& out, uint32_t type, const std::vector<T>& v) {
  put<uint32_t>(out, kArray);
  put<uint32_t>(out, type);
  put<uint64_t>(out, v.size());
  for (const T& e : v) {
    if constexpr (std::is_same_v<T, std::string>) put_string(out, e);
    else put<T>(out, e);
  }
}

void put_value(std::string& out, const GgufValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint32_t>) put<uint32_t>(out, kU32), put(out, v);
        else if constexpr (std::is_same_v<T, int32_t>) put<uint32_t>(out, kI32), put(out, v);
        else if constexpr (std::is_same_v<T, uint64_t>) put<uint32_t>(out, kU64), put(out, v);
        else if constexpr (std::is_same_v<T, float>) put<uint32_t>(out, kF32), put(out, v);
        else if constexpr (std::is_same_v<T, bool>) put<uint32_t>(out, kBool), put<uint8_t>(out, v ? 1 : 0);
        else if constexpr (std::is_same_v<T, std::string>) put<uint32_t>(out, kString), put_string(out, v);
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) put_array(out, kString, v);
        else if constexpr (std::is_same_v<T, std::vector<float>>) put_array(out, kF32, v);
        else put_array(out, kI32, v);
      },
      value);
}

uint64_t padded(uint64_t n) { return (n + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment; }

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, const Shape& shape, std::span<const float> values,
                            GgmlType type) {
  MT_REQUIRE(CheckpointError, int64_t(values.size()) == shape.numel(), "GGUF tensor '", name, "': ", values.size(),
             " values for shape ", shape.str());
  for (const auto& t : tensors_)
    MT_REQUIRE(CheckpointError, t.name != name, "GGUF tensor '", name, "' added twice");
  GgufTensor t{name, shape, type, {}};
  switch (type) {
    case GgmlType::F32:
      t.data.resize(values.size() * 4);
      std::memcpy(t.data.data(), values.data(), t.data.size());
      break;
    case GgmlType::F16:
    case GgmlType::BF16: {
      t.data.resize(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = type == GgmlType::F16 ? f16::from_float(values[i]) : bf16::from_float(values[i]);
        std::memcpy(t.data.data() + 2 * i, &h, 2);
      }
      break;
    }
    case GgmlType::Q8_0:
      MT_REQUIRE(CheckpointError, shape.rank() >= 1 && shape[shape.rank() - 1] % kQ8Block == 0, "GGUF tensor '",
                 name, "' of shape ", shape.str(), ": q8_0 needs rows of a multiple of 32 values");
      t.data = encode_q8_0(values);
      break;
  }
  tensors_.push_back(std::move(t));
}

std::string GgufWriter::header() const {
  std::string h;
  put<uint32_t>(h, 0x46554747u);  // "GGUF"
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, kv_.size());
  for (const auto& [k, v] : kv_) {
    put_string(h, k);
    put_value(h, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(h, t.name);
    put<uint32_t>(h, uint32_t(t.shape.rank()));
    for (int d = t.shape.rank() - 1; d >= 0; --d) put<uint64_t>(h, uint64_t(t.shape[d]));  // innermost first
    put<uint32_t>(h, uint32_t(t.type));
    put<uint64_t>(h, offset);
    offset = padded(offset + t.data.size());
  }
  h.resize(padded(h.size()), '\0');
  return h;
}

std::string GgufWriter::bytes() const {
  std::string out = header();
  for (const auto& t : tensors_) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
    out.resize(padded(out.size()), '\0');
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::filesystem::path file(path);
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  const std::string head = header();
  atomic_write_file(dir, file.filename().string(), [&](int fd, const std::string& tmp) {
    write_all(fd, head.data(), head.size(), tmp);
    const char zeros[kGgufAlignment] = {};
    for (const auto& t : tensors_) {
      write_all(fd, t.data.data(), t.data.size(), tmp);
      write_all(fd, zeros, padded(t.data.size()) - t.data.size(), tmp);
    }
  });
}

}  // namespace meshtrain::checkpoint
