#include "meshtrain/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/dtype_convert.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fault_injection.h"

namespace meshtrain::checkpoint {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw CheckpointError("safetensors file " + source + ": " + what);
}

constexpr DType kAllowed[] = {DType::F32, DType::BF16, DType::F16, DType::F64, DType::I32, DType::I64};

DType parse_st_dtype(const std::string& s, const std::string& source, const std::string& name) {
  for (DType t : kAllowed)
    if (safetensors_dtype_name(t) == s) return t;
  fail(source, "tensor '" + name + "' has unsupported dtype '" + s + "' (allowed: F32, BF16, F16, F64, I32, I64)");
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  MT_THROW(InternalError, "dtype ", int(t));
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t data_bytes, const std::string& source) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());  // rejects ill-formed UTF-8
  } catch (const json::exception& e) {
    fail(source, std::string("header is not valid UTF-8 JSON: ") + e.what());
  }
  if (!j.is_object()) fail(source, "header is not a JSON object");
  SafetensorsHeader h;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail(source, "__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) fail(source, "__metadata__ value of '" + k + "' is not a string");
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object() || v.size() != 3 || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(source, where + " must be an object with exactly dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) fail(source, where + ": dtype is not a string");
    SafetensorsEntry e;
    e.name = name;
    e.dtype = parse_st_dtype(v["dtype"].get<std::string>(), source, name);
    const json& shape = v["shape"];
    if (!shape.is_array() || shape.size() > size_t(Shape::kMaxDims))
      fail(source, where + ": shape is not an array of at most " + std::to_string(Shape::kMaxDims) + " dims");
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (const json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 62))
        fail(source, where + ": shape holds a value that is not a non-negative integer");
      dims.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(numel, d.get<uint64_t>(), &numel)) fail(source, where + ": shape size overflows");
    }
    e.shape = Shape(dims);
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(source, where + ": data_offsets is not [begin, end] of non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end) fail(source, where + ": data_offsets begin > end");
    if (e.end > data_bytes)
      fail(source, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                       ") out of bounds of the " + std::to_string(data_bytes) + "-byte data section");
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &bytes) || bytes != e.end - e.begin)
      fail(source, where + ": shape " + e.shape.str() + " x " + std::string(safetensors_dtype_name(e.dtype)) +
                       " does not match its " + std::to_string(e.end - e.begin) + " bytes (shape/bytes mismatch)");
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  for (const auto& e : h.entries) {
    if (e.begin < pos) fail(source, "tensor '" + e.name + "' data_offsets overlap the previous tensor");
    if (e.begin > pos) fail(source, "gap before tensor '" + e.name + "' (data_offsets not contiguous)");
    pos = e.end;
  }
  if (pos != data_bytes)
    fail(source, "data section has " + std::to_string(data_bytes) + " bytes but tensors cover " + std::to_string(pos) +
                     " (not contiguous to the end)");
  return h;
}

SafetensorsHeader parse_safetensors_buffer(const void* data, size_t size, const std::string& source) {
  if (size < 8) fail(source, "shorter than the 8-byte header size");
  const auto* p = static_cast<const unsigned char*>(data);
  const uint64_t n = read_le64(p);
  if (n > kMaxSafetensorsHeader)
    fail(source, "header size " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxSafetensorsHeader));
  if (n > size - 8) fail(source, "header size " + std::to_string(n) + " exceeds the file");
  SafetensorsHeader h =
      parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(p + 8), size_t(n)), size - 8 - n, source);
  h.data_start = 8 + n;
  return h;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t pos = 0;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    MT_REQUIRE(CheckpointError, t.name != "__metadata__" && names.insert(t.name).second, "safetensors: tensor name '",
               t.name, "' is reserved or duplicated");
    const uint64_t bytes = uint64_t(t.shape.numel()) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", std::string(safetensors_dtype_name(t.dtype))},
                      {"shape", t.shape.dims()},
                      {"data_offsets", {pos, pos + bytes}}};
    pos += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  unsigned char size_le[8];
  for (int i = 0; i < 8; ++i) size_le[i] = static_cast<unsigned char>((uint64_t(text.size()) >> (8 * i)) & 0xff);

  const fs::path file(path);
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  atomic_write_file(dir, file.filename().string(), [&](int fd, const std::string& tmp) {
    write_all(fd, size_le, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const auto& t : tensors) {
      fault::point("export.write", 0);
      write_all(fd, t.data, size_t(t.shape.numel()) * dtype_size(t.dtype), tmp);
    }
  });
}

SafetensorsReader SafetensorsReader::open(const std::string& path) {
  SafetensorsReader r;
  r.path_ = path;
  r.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_REQUIRE(CheckpointError, r.fd_ >= 0, "cannot open safetensors file ", path, ": ", std::strerror(errno));
  struct stat st {};
  MT_REQUIRE(CheckpointError, ::fstat(r.fd_, &st) == 0 && S_ISREG(st.st_mode), path, " is not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) fail(path, "shorter than the 8-byte header size");
  unsigned char le[8];
  pread_all(r.fd_, le, 8, 0, path);
  const uint64_t n = read_le64(le);
  if (n > kMaxSafetensorsHeader)
    fail(path, "header size " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxSafetensorsHeader));
  if (n > size - 8) fail(path, "header size " + std::to_string(n) + " exceeds the file");
  std::string text(size_t(n), '\0');
  pread_all(r.fd_, text.data(), text.size(), 8, path);
  r.header_ = parse_safetensors_header(text, size - 8 - n, path);
  r.header_.data_start = 8 + n;
  return r;
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& o) noexcept
    : path_(std::move(o.path_)), header_(std::move(o.header_)), fd_(std::exchange(o.fd_, -1)) {}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    header_ = std::move(o.header_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  const SafetensorsEntry* e = header_.find(name);
  MT_REQUIRE(CheckpointError, e != nullptr, "safetensors file ", path_, " has no tensor '", name, "'");
  return *e;
}

void SafetensorsReader::read(const std::string& name, void* dst, DType dst_dtype) const {
  const SafetensorsEntry& e = entry(name);
  MT_REQUIRE(CheckpointError, convertible(e.dtype, dst_dtype), "safetensors tensor '", name, "': cannot convert ",
             safetensors_dtype_name(e.dtype), " to ", dtype_name(dst_dtype));
  const size_t n = size_t(e.shape.numel());
  if (e.dtype == dst_dtype) {
    pread_all(fd_, dst, size_t(e.end - e.begin), header_.data_start + e.begin, path_);
    return;
  }
  std::vector<char> tmp(size_t(e.end - e.begin));
  pread_all(fd_, tmp.data(), tmp.size(), header_.data_start + e.begin, path_);
  convert(tmp.data(), e.dtype, dst, dst_dtype, n);
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  std::vector<float> out(size_t(entry(name).shape.numel()));
  read(name, out.data(), DType::F32);
  return out;
}

}  // namespace meshtrain::checkpoint
