#include "meshtrain/checkpoint/export_import.h"

#include <cmath>
#include <filesystem>

#include "meshtrain/checkpoint/dtype_convert.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/gguf_export.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/model_weights.h"
#include "meshtrain/checkpoint/safetensors.h"
#include "meshtrain/checkpoint/tokenizer_files.h"
#include "meshtrain/checkpoint/writer.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"

namespace meshtrain::checkpoint {

bool inside_checkpoint(const std::string& dir) {
  std::error_code ec;
  for (fs::path d = fs::weakly_canonical(fs::absolute(dir), ec); !d.empty(); d = d.parent_path()) {
    if (fs::exists(d / kManifestFile, ec) || fs::is_regular_file(d / kLatestFile, ec)) return true;
    if (d == d.parent_path()) break;
  }
  return false;
}

namespace {

// Where the weights go: `out` itself when it names a file of the format,
// else `out`/model.<ext>.
fs::path weights_path(const std::string& out, const char* ext) {
  std::error_code ec;
  const fs::path p(out);
  const bool dir = out.ends_with('/') || fs::is_directory(p, ec) || p.extension() != ext;
  return dir ? p / (std::string("model") + ext) : p;
}

void refuse_existing(const std::vector<fs::path>& files, bool overwrite) {
  std::error_code ec;
  for (const fs::path& f : files)
    MT_REQUIRE(CheckpointError, overwrite || !fs::exists(fs::symlink_status(f, ec)), "export: ", f.string(),
               " already exists; pass --force to replace it");
}

// The Hugging Face layout: weights, config.json, generation_config.json,
// tokenizer files.
void write_safetensors_dir(const CheckpointReader& reader, const model::ModelConfig& cfg, const fs::path& file,
                           const ExportOptions& o, ExportResult& r) {
  const fs::path dir = file.parent_path();
  const nlohmann::json& meta = reader.metadata();
  const bool has_tok = meta.contains(kMetaTokenizer);
  std::vector<fs::path> targets = {file, dir / "config.json", dir / "generation_config.json"};
  if (has_tok)
    for (const auto& n : tokenizer_file_names(meta[kMetaTokenizer])) targets.push_back(dir / n);
  refuse_existing(targets, o.overwrite);
  const std::vector<NamedTensor> hf = to_hf_tensors(cfg, read_param_values(reader, cfg, o.progress));
  std::vector<std::vector<uint16_t>> halves;  // bf16 copies, alive until written
  halves.reserve(hf.size());
  std::vector<SafetensorsTensor> views;
  for (const auto& t : hf) {
    if (o.dtype == DType::BF16) {
      auto& h = halves.emplace_back(t.values.size());
      convert(t.values.data(), DType::F32, h.data(), DType::BF16, t.values.size());
      views.push_back({t.name, DType::BF16, t.shape, h.data()});
    } else {
      views.push_back({t.name, DType::F32, t.shape, t.values.data()});
    }
    r.bytes += t.values.size() * dtype_size(o.dtype);
  }
  std::map<std::string, std::string> st_meta = {{"format", "pt"},
                                                {"meshtrain.model_config", model_config_to_json(cfg).dump()},
                                                {"meshtrain.step", std::to_string(reader.step())}};
  if (has_tok) st_meta["meshtrain.tokenizer"] = meta[kMetaTokenizer].dump();
  fs::create_directories(dir);
  if (o.progress) o.progress("writing", 0, 1);
  write_safetensors(file.string(), views, st_meta);
  r.files.push_back(file.string());
  r.tensors = hf.size();
  nlohmann::json hf_cfg = hf_config_json(cfg);
  hf_cfg["torch_dtype"] = o.dtype == DType::BF16 ? "bfloat16" : "float32";
  std::vector<std::string> tok_files;
  if (has_tok) tok_files = write_tokenizer_files(meta[kMetaTokenizer], dir, cfg.vocab_size, cfg.max_seq_len, &hf_cfg);
  atomic_write_file(dir, "config.json", hf_cfg.dump(2) + "\n");
  nlohmann::json gen = {{"_from_model_config", true}, {"max_length", cfg.max_seq_len}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (hf_cfg.contains(key)) gen[key] = hf_cfg[key];
  atomic_write_file(dir, "generation_config.json", gen.dump(2) + "\n");
  r.files.push_back((dir / "config.json").string());
  r.files.push_back((dir / "generation_config.json").string());
  r.files.insert(r.files.end(), tok_files.begin(), tok_files.end());
}

void write_gguf(const CheckpointReader& reader, const model::ModelConfig& cfg, const fs::path& file,
                const ExportOptions& o, ExportResult& r) {
  const nlohmann::json& meta = reader.metadata();
  MT_REQUIRE(CheckpointError, meta.contains(kMetaTokenizer), "GGUF export: checkpoint ", reader.directory().string(),
             " records no tokenizer, and a GGUF file carries its vocabulary");
  refuse_existing({file}, o.overwrite);
  const auto tok = data::make_tokenizer(meta[kMetaTokenizer]);
  const std::string name = reader.directory().parent_path().filename().string() + "-" + step_dir_name(reader.step());
  GgufModel g = gguf_model(cfg, read_param_values(reader, cfg, o.progress), *tok, o.gguf_type, name);
  if (file.has_parent_path()) fs::create_directories(file.parent_path());
  if (o.progress) o.progress("writing", 0, 1);
  g.file.write(file.string());
  r.files.push_back(file.string());
  r.tensors = g.file.tensors().size();
  for (const auto& t : g.file.tensors()) r.bytes += t.data.size();
  r.notes = std::move(g.notes);
}

}  // namespace

ExportResult export_model(const CheckpointReader& reader, const std::string& out, const ExportOptions& o) {
  MT_REQUIRE(ConfigError, o.dtype == DType::F32 || o.dtype == DType::BF16, "export dtype ", dtype_name(o.dtype),
             ": expected f32 or bf16");
  const bool gguf = o.format == ExportFormat::Gguf;
  const fs::path file = weights_path(out, gguf ? ".gguf" : ".safetensors");
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  MT_REQUIRE(CheckpointError, !inside_checkpoint(dir.string()), "export: --out ", out,
             " lies inside a checkpoint directory; write the deployment artifact elsewhere");
  const model::ModelConfig cfg = model_config_of(reader);
  ExportResult r;
  r.arch = hf_arch_for(cfg);  // fails before anything is read or written
  if (gguf) write_gguf(reader, cfg, file, o, r);
  else write_safetensors_dir(reader, cfg, file.has_parent_path() ? file : fs::path(".") / file, o, r);
  r.model_path = file.string();
  return r;
}

ExportResult export_safetensors(const CheckpointReader& reader, const std::string& out_path, DType dtype,
                                const ProgressFn& progress, bool overwrite) {
  ExportOptions o;
  o.dtype = dtype;
  o.progress = progress;
  o.overwrite = overwrite;
  return export_model(reader, out_path, o);
}

namespace {

// Weights that are NaN or infinite make every loss NaN: refused by name.
void check_finite(const ParamValues& values, const std::string& path) {
  int64_t bad = 0;
  std::string first;
  for (const auto& [name, v] : values)
    for (float x : v)
      if (!std::isfinite(x)) {
        if (bad++ == 0) first = name;
      }
  MT_REQUIRE(CheckpointError, bad == 0, "import: ", path, " holds ", bad, " NaN or infinite weight(s) (first in '",
             first, "'); a model with them computes NaN losses. Import it anyway with --allow-nonfinite");
}

}  // namespace

std::string import_safetensors(const std::string& path, const std::string& out_root, bool overwrite,
                               bool allow_nonfinite) {
  std::error_code ec;
  // A committed step is never written into: out_root must be a root of its own.
  MT_REQUIRE(CheckpointError, !fs::exists(fs::path(out_root) / kManifestFile, ec) &&
                                  !inside_checkpoint(fs::absolute(out_root).parent_path().string()),
             "import: --out ", out_root, " is or lies inside a checkpoint directory; import into a checkpoint root "
             "of its own (e.g. runs/imported/checkpoints)");
  const bool has_checkpoints =
      fs::exists(fs::path(out_root) / kLatestFile, ec) || !list_complete_checkpoints(out_root).empty();
  MT_REQUIRE(CheckpointError, overwrite || !has_checkpoints, "import: ", out_root,
             " already holds checkpoints; importing would repoint its 'latest' to the imported step 0. Use a new "
             "directory, or pass --force");
  const SafetensorsReader file = SafetensorsReader::open(path);
  const model::ModelConfig cfg = model_config_of(file);
  const ParamValues values = read_param_values(file, cfg);
  if (!allow_nonfinite) check_finite(values, path);
  const model::ModelSpec spec = model::build_model_spec(cfg);

  SaveRequest req;
  req.step = 0;
  req.metadata = {{"step", 0},
                  {"imported", {{"from", path}, {"arch", to_string(hf_arch_for(cfg))}, {"contents", "parameters"}}},
                  {kMetaModelConfig, model_config_to_json(cfg)}};
  auto tok = file.metadata().find("meshtrain.tokenizer");
  const fs::path beside = fs::path(path).parent_path() / "tokenizer.model";
  if (tok != file.metadata().end()) {
    req.metadata[kMetaTokenizer] = nlohmann::json::parse(tok->second);
  } else if (fs::exists(beside)) {  // a SentencePiece model the Hugging Face way
    req.metadata[kMetaTokenizer] = data::SentencePieceTokenizer::from_file(beside.string())->describe();
  } else if (cfg.vocab_size == data::ByteTokenizer::kVocab) {
    req.metadata[kMetaTokenizer] = data::ByteTokenizer().describe();
  }
  for (const auto& p : spec.params)
    req.pieces.push_back({p.name, p.shape, DType::F32, full_box(p.shape), values.at(p.name).data()});
  return save_checkpoint_single(out_root, req);
}

}  // namespace meshtrain::checkpoint
