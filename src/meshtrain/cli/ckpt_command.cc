// `meshtrain ckpt inspect|verify|export|import`: look into, check and convert
// distributed checkpoints (docs/checkpoints.md).
#include <chrono>
#include <cstdio>
#include <string>

#include "meshtrain/checkpoint/compare.h"
#include "meshtrain/checkpoint/export_import.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {
namespace {

namespace ck = meshtrain::checkpoint;

constexpr const char* kUsage =
    "usage: meshtrain ckpt inspect DIR\n"
    "       meshtrain ckpt verify DIR\n"
    "       meshtrain ckpt export DIR --out model.safetensors [--dtype f32|bf16]   (config.json beside it)\n"
    "       meshtrain ckpt import model.safetensors --out DIR   (needs config.json beside the file)\n"
    "       meshtrain ckpt diff DIR_A DIR_B                     (bitwise: every tensor and the training position)\n"
    "DIR is a step directory or a checkpoint root with a 'latest' pointer.";

[[noreturn]] void usage_error(const std::string& what) { MT_THROW(ConfigError, "ckpt: ", what, "\n", kUsage); }

struct Parsed {
  std::string input, out;
  std::string dtype = "f32";  // export: f32 | bf16
};

Parsed parse(const Args& args, bool needs_out) {
  Parsed p;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--out") {
      if (i + 1 >= args.size()) usage_error("--out needs a value");
      p.out = args[++i];
    } else if (a.rfind("--out=", 0) == 0) {
      p.out = a.substr(6);
    } else if (a == "--dtype" && args[0] == "export") {
      if (i + 1 >= args.size()) usage_error("--dtype needs a value (f32 or bf16)");
      p.dtype = args[++i];
      if (p.dtype != "f32" && p.dtype != "bf16") usage_error("--dtype " + p.dtype + ": expected f32 or bf16");
    } else if (!a.empty() && a[0] == '-') {
      usage_error("unknown flag '" + a + "'");
    } else if (p.input.empty()) {
      p.input = a;
    } else {
      usage_error("unexpected argument '" + a + "'");
    }
  }
  if (p.input.empty()) usage_error(args[0] + " needs an input path");
  if (needs_out && p.out.empty()) usage_error(args[0] + " needs --out");
  if (!needs_out && !p.out.empty()) usage_error(args[0] + " takes no --out");
  return p;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

void print_meta(const nlohmann::json& meta, const char* key, const char* label) {
  if (meta.contains(key)) std::printf("  %-18s %s\n", label, meta[key].dump().c_str());
}

int inspect(const Args& args) {
  const Parsed p = parse(args, false);
  const auto r = ck::CheckpointReader::open(p.input, {ck::Verify::OnRead});
  const auto& m = r.manifest();
  const auto& meta = r.metadata();
  std::printf("checkpoint %s\n", r.directory().c_str());
  std::printf("  format version     %d\n", m.format_version);
  std::printf("  step               %lld\n", (long long)m.step);
  std::printf("  written by         %d rank(s), %zu file(s), %s\n", m.world_size, m.files.size(),
              human_bytes(double(r.total_bytes())).c_str());
  print_meta(meta, "layout", "layout");
  print_meta(meta, "consumed_samples", "consumed samples");
  print_meta(meta, "consumed_tokens", "consumed tokens");
  print_meta(meta, "data", "data position");
  print_meta(meta, "imported", "imported");
  if (meta.contains(ck::kMetaModelConfig)) {
    try {
      std::printf("  %-18s %s\n", "model", ck::model_config_from_json(meta[ck::kMetaModelConfig]).describe().c_str());
    } catch (const std::exception& e) {
      std::printf("  %-18s invalid: %s\n", "model", e.what());
    }
  }
  if (meta.contains(ck::kMetaTokenizer)) std::printf("  %-18s %s\n", "tokenizer", meta[ck::kMetaTokenizer].dump().c_str());
  std::string keys;
  for (const auto& [k, v] : meta.items()) keys += (keys.empty() ? "" : ", ") + k;
  std::printf("  metadata keys      %s\n", keys.c_str());
  std::printf("  tensors            %zu\n", m.tensors.size());
  uint64_t params = 0;
  for (const auto& t : m.tensors) {
    std::printf("    %-52s %-5s %-18s %3zu piece(s) %10s\n", t.name.c_str(), std::string(dtype_name(t.dtype)).c_str(),
                t.shape.str().c_str(), t.pieces.size(), human_bytes(double(t.nbytes())).c_str());
    params += uint64_t(t.shape.numel());
  }
  std::printf("  elements           %llu\n", (unsigned long long)params);
  return 0;
}

int verify(const Args& args) {
  const Parsed p = parse(args, false);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = ck::CheckpointReader::open(p.input);  // validates and hashes everything
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t pieces = 0;
  for (const auto& t : r.manifest().tensors) pieces += t.pieces.size();
  std::printf("OK %s: step %lld, %zu tensors, %zu pieces, %s verified in %.2f s\n", r.directory().c_str(),
              (long long)r.step(), r.manifest().tensors.size(), pieces, human_bytes(double(r.total_bytes())).c_str(), s);
  return 0;
}

int export_cmd(const Args& args) {
  const Parsed p = parse(args, true);
  const auto r = ck::CheckpointReader::open(p.input);
  const auto res = ck::export_safetensors(r, p.out, parse_dtype(p.dtype));
  std::printf("exported step %lld as %s: %zu tensors, %s -> %s (+ %s)\n", (long long)r.step(), ck::to_string(res.arch),
              res.tensors, human_bytes(double(res.bytes)).c_str(), res.safetensors_path.c_str(), res.config_path.c_str());
  return 0;
}

int import_cmd(const Args& args) {
  const Parsed p = parse(args, true);
  const std::string dir = ck::import_safetensors(p.input, p.out);
  std::printf("imported %s -> %s (parameters only; training starts fresh from these weights)\n", p.input.c_str(),
              dir.c_str());
  return 0;
}

// Exit 0 when both checkpoints hold the same tensors bit for bit and the
// same training position (what an exact resume must produce).
int diff_cmd(const Args& args) {
  if (args.size() != 3) usage_error("diff needs two checkpoint paths");
  const auto a = ck::CheckpointReader::open(args[1]), b = ck::CheckpointReader::open(args[2]);
  const auto d = ck::compare_checkpoints(a, b);
  std::printf("A: %s\nB: %s\n%s", a.directory().c_str(), b.directory().c_str(), d.str().c_str());
  return d.identical() ? 0 : 1;
}

}  // namespace

int cmd_ckpt(const Args& args) {
  if (args.empty()) usage_error("missing subcommand");
  const std::string& sub = args[0];
  if (sub == "inspect") return inspect(args);
  if (sub == "verify") return verify(args);
  if (sub == "export") return export_cmd(args);
  if (sub == "import") return import_cmd(args);
  if (sub == "diff") return diff_cmd(args);
  usage_error("unknown subcommand '" + sub + "'");
}

}  // namespace meshtrain::cli
