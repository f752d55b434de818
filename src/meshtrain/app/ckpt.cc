#include "meshtrain/app/ckpt.h"

#include <chrono>
#include <cstdio>

#include "meshtrain/app/progress.h"
#include "meshtrain/checkpoint/compare.h"
#include "meshtrain/checkpoint/export_import.h"
#include "meshtrain/checkpoint/gguf_file.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::app {
namespace ck = meshtrain::checkpoint;
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string row(const char* label, const std::string& value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "  %-18s ", label);
  return buf + value + "\n";
}

}  // namespace

std::string ckpt_inspect(const std::string& dir) {
  const auto r = ck::CheckpointReader::open(dir, {ck::Verify::OnRead});
  const auto& m = r.manifest();
  const auto& meta = r.metadata();
  std::string out = "checkpoint " + r.directory().string() + "\n";
  out += row("format version", std::to_string(m.format_version));
  out += row("step", std::to_string(m.step));
  out += row("written by", std::to_string(m.world_size) + " rank(s), " + std::to_string(m.files.size()) +
                               " file(s), " + human_bytes(double(r.total_bytes())));
  for (const auto& [key, label] : {std::pair{"layout", "layout"}, {"consumed_samples", "consumed samples"},
                                   {"consumed_tokens", "consumed tokens"}, {"data", "data position"},
                                   {"imported", "imported"}})
    if (meta.contains(key)) out += row(label, meta[key].dump());
  if (meta.contains(ck::kMetaModelConfig)) {
    try {
      out += row("model", ck::model_config_from_json(meta[ck::kMetaModelConfig]).describe());
    } catch (const std::exception& e) {
      out += row("model", std::string("invalid: ") + e.what());
    }
  }
  if (meta.contains(ck::kMetaTokenizer))
    out += row("tokenizer", data::tokenizer_summary(meta[ck::kMetaTokenizer]).dump());
  std::string keys;
  for (const auto& [k, v] : meta.items()) keys += (keys.empty() ? "" : ", ") + k;
  out += row("metadata keys", keys);
  out += row("tensors", std::to_string(m.tensors.size()));
  uint64_t params = 0;
  char buf[256];
  for (const auto& t : m.tensors) {
    std::snprintf(buf, sizeof buf, "    %-52s %-5s %-18s %3zu piece(s) %10s\n", t.name.c_str(),
                  std::string(dtype_name(t.dtype)).c_str(), t.shape.str().c_str(), t.pieces.size(),
                  human_bytes(double(t.nbytes())).c_str());
    out += buf;
    params += uint64_t(t.shape.numel());
  }
  out += row("elements", std::to_string(params));
  return out;
}

std::string ckpt_verify(const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = ck::CheckpointReader::open(dir);  // validates and hashes everything
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t pieces = 0;
  for (const auto& t : r.manifest().tensors) pieces += t.pieces.size();
  char buf[512];
  std::snprintf(buf, sizeof buf, "OK %s: step %lld, %zu tensors, %zu pieces, %s verified in %.2f s",
                r.directory().c_str(), (long long)r.step(), r.manifest().tensors.size(), pieces,
                human_bytes(double(r.total_bytes())).c_str(), s);
  return buf;
}

ExportSummary ckpt_export(const std::string& dir, const std::string& out, const std::string& format,
                          const std::string& dtype, bool progress, bool force) {
  MT_REQUIRE(ConfigError, format == "safetensors" || format == "gguf", "ckpt export --format ", format,
             ": expected safetensors or gguf");
  ck::ExportOptions o;
  o.format = format == "gguf" ? ck::ExportFormat::Gguf : ck::ExportFormat::Safetensors;
  if (o.format == ck::ExportFormat::Gguf) {
    o.gguf_type = ck::parse_ggml_type(dtype);
  } else {
    MT_REQUIRE(ConfigError, dtype == "f32" || dtype == "bf16", "ckpt export --dtype ", dtype,
               ": safetensors stores f32 or bf16 (f16 and q8_0 are GGUF types: add --format gguf)");
    o.dtype = parse_dtype(dtype);
  }
  o.overwrite = force;
  if (progress) o.progress = stderr_progress("ckpt export", "tensors");
  const auto r = ck::CheckpointReader::open(dir);
  const auto res = ck::export_model(r, out, o);
  std::string text = "exported step " + std::to_string(r.step()) + " as " +
                     (o.format == ck::ExportFormat::Gguf ? "GGUF (llama, " + dtype + ")" : ck::to_string(res.arch)) +
                     ": " + std::to_string(res.tensors) + " tensors, " + human_bytes(double(res.bytes));
  for (const auto& f : res.files) text += "\n  " + f;
  for (const auto& n : res.notes) text += "\n  note: " + n;
  return {text};
}

std::string ckpt_import(const std::string& file, const std::string& out_root, bool force, bool allow_nonfinite) {
  const std::string dir = ck::import_safetensors(file, out_root, force, allow_nonfinite);
  return "imported " + file + " -> " + dir + " (parameters only; training starts fresh from these weights)";
}

DiffResult ckpt_diff(const std::string& a, const std::string& b) {
  const auto ra = ck::CheckpointReader::open(a), rb = ck::CheckpointReader::open(b);
  const auto d = ck::compare_checkpoints(ra, rb);
  return {d.identical(), "A: " + ra.directory().string() + "\nB: " + rb.directory().string() + "\n" + d.str()};
}

}  // namespace meshtrain::app
