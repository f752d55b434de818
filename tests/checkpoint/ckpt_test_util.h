// Helpers for checkpoint tests: scratch directories, deterministic tensor
// contents, partitions of a tensor over ranks, manifest tampering.
#pragma once

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/box.h"
#include "meshtrain/checkpoint/manifest.h"
#include "meshtrain/checkpoint/sha256.h"
#include "meshtrain/checkpoint/writer.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::testing {

namespace ck = meshtrain::checkpoint;
namespace fs = std::filesystem;

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "mt-ckpt-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// A logical tensor with deterministic contents depending on (name, step).
struct TestTensor {
  std::string name;
  Shape shape;
  DType dtype;
  std::vector<char> bytes;  // full tensor, row-major
};

inline TestTensor make_tensor(const std::string& name, const Shape& shape, DType dtype, int64_t step) {
  TestTensor t{name, shape, dtype, std::vector<char>(size_t(shape.numel()) * dtype_size(dtype))};
  CounterRng rng(uint64_t(step) * 7919 + 1);
  const uint64_t stream = stream_id(name.c_str());
  for (int64_t i = 0; i < shape.numel(); ++i) {
    const float v = rng.normal(stream, uint64_t(i));
    char* p = t.bytes.data() + size_t(i) * dtype_size(dtype);
    switch (dtype) {
      case DType::F32: std::memcpy(p, &v, 4); break;
      case DType::F64: { const double d = double(v) * 1.000001; std::memcpy(p, &d, 8); break; }
      case DType::BF16: { const bf16 b(v); std::memcpy(p, &b, 2); break; }
      case DType::F16: { const f16 h(v); std::memcpy(p, &h, 2); break; }
      case DType::I32: { const int32_t x = int32_t(rng.bits(stream, uint64_t(i))[0]); std::memcpy(p, &x, 4); break; }
      case DType::I64: { const int64_t x = int64_t(rng.bits(stream, uint64_t(i))[1]) << 20; std::memcpy(p, &x, 8); break; }
    }
  }
  return t;
}

inline std::vector<TestTensor> make_state(int64_t step) {
  return {make_tensor("a.weight", Shape{6, 10}, DType::F32, step),
          make_tensor("b.bias", Shape{7}, DType::BF16, step),
          make_tensor("c.cube", Shape{3, 4, 5}, DType::F64, step),
          make_tensor("d.count", Shape{}, DType::I64, step),
          make_tensor("e.ids", Shape{5, 3}, DType::I32, step)};
}

// Extracts `box` of a full tensor into a new buffer.
inline std::vector<char> extract(const TestTensor& t, const ck::Box& box) {
  std::vector<char> out(size_t(box.numel()) * dtype_size(t.dtype));
  ck::copy_region(t.bytes.data(), ck::full_box(t.shape), out.data(), box, box, dtype_size(t.dtype));
  return out;
}

enum class Partition { Flat, Dim0, LastDim, Owner0 };

// The boxes rank `rank` of `world` owns under `how`.
inline std::vector<ck::Box> owned_boxes(const Shape& shape, Partition how, int world, int rank) {
  if (shape.rank() == 0 || how == Partition::Owner0) {
    if (rank == 0) return {ck::full_box(shape)};
    return {};
  }
  if (how == Partition::Flat) return ck::balanced_part_boxes(shape, world, rank);
  const int d = how == Partition::Dim0 ? 0 : shape.rank() - 1;
  const int64_t n = shape[d], b = n * rank / world, e = n * (rank + 1) / world;
  if (b == e) return {};
  ck::Box box = ck::full_box(shape);
  box.offset[size_t(d)] = b;
  box.length[size_t(d)] = e - b;
  return {box};
}

// Pieces of `state` for one rank; `storage` keeps the buffers alive.
inline ck::SaveRequest make_request(const std::vector<TestTensor>& state, int64_t step, Partition how, int world,
                                    int rank, std::vector<std::vector<char>>& storage) {
  ck::SaveRequest req;
  req.step = step;
  req.metadata = {{"step", step}, {"note", "test"}};
  storage.clear();
  storage.reserve(64);
  for (const auto& t : state)
    for (const ck::Box& b : owned_boxes(t.shape, how, world, rank)) {
      storage.push_back(extract(t, b));
      req.pieces.push_back({t.name, t.shape, t.dtype, b, storage.back().data()});
    }
  return req;
}

// The state crash tests save: make_state plus a 1 MiB tensor (writes take a while).
inline std::vector<TestTensor> crash_state(int64_t step) {
  auto s = make_state(step);
  s.push_back(make_tensor("big", Shape{256, 1024}, DType::F32, step));
  return s;
}

inline std::string read_file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

inline void write_json(const fs::path& p, const nlohmann::json& j) {
  std::ofstream out(p, std::ios::trunc);
  out << j.dump(1);
}

// Rewrites the manifest as if it had been written that way: its digest
// (manifest.json.sha256) follows the edit, so the checks behind the digest
// are the ones reached.
inline void tamper_manifest(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = read_json(dir / ck::kManifestFile);
  edit(j);
  const std::string text = j.dump(1);
  std::ofstream(dir / ck::kManifestFile, std::ios::trunc) << text;
  if (fs::exists(dir / ck::kManifestDigestFile))
    std::ofstream(dir / ck::kManifestDigestFile, std::ios::trunc) << ck::manifest_digest_line(text);
}

}  // namespace meshtrain::testing
