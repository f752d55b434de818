#include "meshtrain/checkpoint/manifest.h"

#include <algorithm>
#include <map>
#include <set>

#include "meshtrain/checkpoint/sha256.h"
#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw CheckpointError("checkpoint manifest " + source + ": " + what);
}

const json& field(const json& obj, const char* key, const std::string& source, const std::string& where) {
  if (!obj.is_object()) fail(source, where + " is not a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) fail(source, where + " has no \"" + key + "\"");
  return *it;
}

int64_t get_int(const json& obj, const char* key, const std::string& source, const std::string& where) {
  const json& v = field(obj, key, source, where);
  if (!v.is_number_integer()) fail(source, where + "." + key + " is not an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) fail(source, where + "." + key + " too large");
  return v.get<int64_t>();
}

uint64_t get_uint(const json& obj, const char* key, const std::string& source, const std::string& where) {
  const int64_t v = get_int(obj, key, source, where);
  if (v < 0) fail(source, where + "." + key + " is negative");
  return uint64_t(v);
}

std::string get_string(const json& obj, const char* key, const std::string& source, const std::string& where) {
  const json& v = field(obj, key, source, where);
  if (!v.is_string()) fail(source, where + "." + key + " is not a string");
  return v.get<std::string>();
}

std::vector<int64_t> get_dims(const json& obj, const char* key, const std::string& source, const std::string& where) {
  const json& v = field(obj, key, source, where);
  if (!v.is_array() || v.size() > size_t(Shape::kMaxDims))
    fail(source, where + "." + key + " is not an array of at most " + std::to_string(Shape::kMaxDims) + " integers");
  std::vector<int64_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail(source, where + "." + key + " holds a non-integer");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

PieceEntry piece_from_json(const json& p, const std::string& source, const std::string& where) {
  PieceEntry e;
  e.box.offset = get_dims(p, "offset", source, where);
  e.box.length = get_dims(p, "length", source, where);
  e.file = get_string(p, "file", source, where);
  e.byte_offset = get_uint(p, "byte_offset", source, where);
  e.byte_length = get_uint(p, "byte_length", source, where);
  e.sha256 = get_string(p, "sha256", source, where);
  return e;
}

TensorEntry tensor_from_json(const json& t, const std::string& source, size_t index) {
  std::string where = "tensors[" + std::to_string(index) + "]";
  TensorEntry e;
  e.name = get_string(t, "name", source, where);
  where += " ('" + e.name + "')";
  const auto dims = get_dims(t, "shape", source, where);
  for (int64_t d : dims)
    if (d < 0) fail(source, where + ": negative dim in shape");
  e.shape = Shape(dims);
  e.dtype = dtype_from_name(get_string(t, "dtype", source, where), source);
  const json& pieces = field(t, "pieces", source, where);
  if (!pieces.is_array()) fail(source, where + ".pieces is not an array");
  for (size_t i = 0; i < pieces.size(); ++i)
    e.pieces.push_back(piece_from_json(pieces[i], source, where + ".pieces[" + std::to_string(i) + "]"));
  return e;
}

json tensor_to_json(const TensorEntry& t) {
  json pieces = json::array();
  for (const auto& p : t.pieces)
    pieces.push_back({{"offset", p.box.offset},
                      {"length", p.box.length},
                      {"file", p.file},
                      {"byte_offset", p.byte_offset},
                      {"byte_length", p.byte_length},
                      {"sha256", p.sha256}});
  return {{"name", t.name}, {"shape", t.shape.dims()}, {"dtype", std::string(dtype_name(t.dtype))},
          {"pieces", std::move(pieces)}};
}

// numel * elem without overflow, capped at 2^62.
bool checked_bytes(const Shape& s, size_t elem, uint64_t& out) {
  uint64_t n = 1;
  for (int d = 0; d < s.rank(); ++d)
    if (__builtin_mul_overflow(n, uint64_t(s[d]), &n)) return false;
  if (__builtin_mul_overflow(n, uint64_t(elem), &out)) return false;
  return out <= (uint64_t(1) << 62);
}

void check_coverage(const TensorEntry& t, const std::string& source) {
  const std::string where = "tensor '" + t.name + "'";
  uint64_t total_bytes = 0;
  if (!checked_bytes(t.shape, dtype_size(t.dtype), total_bytes))
    fail(source, where + ": shape " + t.shape.str() + " is too large (size overflow)");
  const uint64_t numel = total_bytes / dtype_size(t.dtype);
  uint64_t covered = 0;
  for (const auto& p : t.pieces) {
    if (p.box.offset.size() != p.box.length.size() || int(p.box.offset.size()) != t.shape.rank())
      fail(source, where + ": piece box " + p.box.str() + " has the wrong rank for shape " + t.shape.str());
    if (!box_inside(p.box, t.shape))
      fail(source, where + ": piece box " + p.box.str() + " lies outside the global shape " + t.shape.str());
    const uint64_t n = uint64_t(p.box.numel());
    if (p.byte_length != n * dtype_size(t.dtype))
      fail(source, where + ": piece " + p.box.str() + " has byte_length " + std::to_string(p.byte_length) +
                       ", its box needs " + std::to_string(n * dtype_size(t.dtype)));
    if (!is_sha256_hex(p.sha256)) fail(source, where + ": piece " + p.box.str() + " sha256 is not a 64-digit hex SHA-256");
    covered += n;
  }
  // Overlaps: sweep over dim 0 (pieces that can meet share a dim-0 range).
  if (t.shape.rank() > 0) {
    std::vector<const PieceEntry*> order;
    for (const auto& p : t.pieces) order.push_back(&p);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->box.offset[0] < b->box.offset[0]; });
    for (size_t i = 0; i < order.size(); ++i)
      for (size_t j = i + 1; j < order.size(); ++j) {
        if (order[j]->box.offset[0] >= order[i]->box.offset[0] + order[i]->box.length[0]) break;
        if (intersect(order[i]->box, order[j]->box))
          fail(source, where + ": pieces " + order[i]->box.str() + " and " + order[j]->box.str() + " overlap");
      }
  } else if (t.pieces.size() > 1) {
    fail(source, where + ": scalar stored by " + std::to_string(t.pieces.size()) + " pieces (overlap)");
  }
  if (covered != numel)
    fail(source, where + ": pieces cover " + std::to_string(covered) + " of " + std::to_string(numel) +
                     " elements (gap in coverage)");
}

// No two pieces share bytes of a file: a manifest that points one tensor at
// another's bytes would pass every digest.
void check_disjoint_bytes(const Manifest& m, const std::string& source) {
  struct Span {
    uint64_t begin, end;
    const std::string* tensor;
    const PieceEntry* piece;
  };
  std::map<std::string, std::vector<Span>> by_file;
  for (const auto& t : m.tensors)
    for (const auto& p : t.pieces)
      if (p.byte_length > 0) by_file[p.file].push_back({p.byte_offset, p.byte_offset + p.byte_length, &t.name, &p});
  for (auto& [file, spans] : by_file) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].begin < spans[i - 1].end)
        fail(source, "tensor '" + *spans[i - 1].tensor + "' piece " + spans[i - 1].piece->box.str() + " and tensor '" +
                         *spans[i].tensor + "' piece " + spans[i].piece->box.str() + " share bytes [" +
                         std::to_string(spans[i].begin) + ", " + std::to_string(std::min(spans[i].end, spans[i - 1].end)) +
                         ") of file '" + file + "'");
  }
}

}  // namespace

DType dtype_from_name(std::string_view name, const std::string& source) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64})
    if (dtype_name(t) == name) return t;
  fail(source, "unknown dtype '" + std::string(name) + "' (known: f32, f64, bf16, f16, i32, i64)");
}

void check_relative_path(const std::string& path, const std::string& source) {
  if (path.empty()) fail(source, "empty file path");
  if (path[0] == '/') fail(source, "file path '" + path + "' is an absolute path");
  if (path.find('\0') != std::string::npos || path.find('\\') != std::string::npos)
    fail(source, "file path '" + path + "' holds a forbidden character");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part == "..") fail(source, "file path '" + path + "' has a '..' component (escapes the checkpoint directory)");
    if (part.empty() || part == ".") fail(source, "file path '" + path + "' has an empty or '.' component");
    start = end + 1;
  }
}

const TensorEntry* Manifest::find(const std::string& name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorEntry& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

const FileEntry* Manifest::find_file(const std::string& path) const {
  for (const auto& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

json Manifest::to_json() const {
  json files_j = json::array();
  for (const auto& f : files) files_j.push_back({{"path", f.path}, {"bytes", f.bytes}});
  json tensors_j = json::array();
  for (const auto& t : tensors) tensors_j.push_back(tensor_to_json(t));
  return {{"format", kFormatName}, {"format_version", format_version}, {"step", step},
          {"world_size", world_size}, {"files", std::move(files_j)}, {"tensors", std::move(tensors_j)},
          {"metadata", metadata}};
}

void validate_manifest(const Manifest& m, const std::string& source) {
  if (m.world_size < 1) fail(source, "world_size " + std::to_string(m.world_size) + " < 1");
  std::set<std::string> paths;
  for (const auto& f : m.files) {
    check_relative_path(f.path, source);
    if (!paths.insert(f.path).second) fail(source, "file '" + f.path + "' listed twice");
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorEntry& t = m.tensors[i];
    if (t.name.empty()) fail(source, "tensors[" + std::to_string(i) + "] has an empty name");
    if (i > 0 && !(m.tensors[i - 1].name < t.name))
      fail(source, "tensor '" + t.name + "' is duplicated or out of order");
    check_coverage(t, source);
    for (const auto& p : t.pieces) {
      const FileEntry* f = m.find_file(p.file);
      if (!f) fail(source, "tensor '" + t.name + "': piece file '" + p.file + "' is not listed in files");
      uint64_t end = 0;
      if (__builtin_add_overflow(p.byte_offset, p.byte_length, &end) || end > f->bytes)
        fail(source, "tensor '" + t.name + "': piece " + p.box.str() + " bytes [" + std::to_string(p.byte_offset) +
                         ", +" + std::to_string(p.byte_length) + ") exceed file '" + p.file + "' size " +
                         std::to_string(f->bytes));
    }
  }
  check_disjoint_bytes(m, source);
}

Manifest parse_manifest(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(source, "top level is not a JSON object");
  const std::string where = "manifest";
  if (get_string(j, "format", source, where) != kFormatName)
    fail(source, "format is not \"" + std::string(kFormatName) + "\"");
  Manifest m;
  const int64_t version = get_int(j, "format_version", source, where);
  if (version != kFormatVersion)
    fail(source, "format_version " + std::to_string(version) + " is not supported (this build reads " +
                     std::to_string(kFormatVersion) + ")");
  m.format_version = int(version);
  m.step = get_int(j, "step", source, where);
  const int64_t world = get_int(j, "world_size", source, where);
  if (world < 1 || world > (1 << 24)) fail(source, "world_size " + std::to_string(world) + " out of range");
  m.world_size = int(world);
  const json& files = field(j, "files", source, where);
  if (!files.is_array()) fail(source, "files is not an array");
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string w = "files[" + std::to_string(i) + "]";
    m.files.push_back({get_string(files[i], "path", source, w), get_uint(files[i], "bytes", source, w)});
  }
  const json& tensors = field(j, "tensors", source, where);
  if (!tensors.is_array()) fail(source, "tensors is not an array");
  for (size_t i = 0; i < tensors.size(); ++i) m.tensors.push_back(tensor_from_json(tensors[i], source, i));
  m.metadata = field(j, "metadata", source, where);
  if (!m.metadata.is_object()) fail(source, "metadata is not a JSON object");
  validate_manifest(m, source);
  return m;
}

json pieces_to_json(const std::vector<TensorEntry>& tensors) {
  json out = json::array();
  for (const auto& t : tensors) out.push_back(tensor_to_json(t));
  return out;
}

std::vector<TensorEntry> pieces_from_json(const json& j, const std::string& source) {
  if (!j.is_array()) fail(source, "piece list is not an array");
  std::vector<TensorEntry> out;
  for (size_t i = 0; i < j.size(); ++i) out.push_back(tensor_from_json(j[i], source, i));
  return out;
}

}  // namespace meshtrain::checkpoint
