#include "meshtrain/checkpoint/export_import.h"

#include <cmath>
#include <filesystem>

#include "meshtrain/checkpoint/dtype_convert.h"
#include "meshtrain/checkpoint/fs_util.h"
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

ExportResult export_safetensors(const CheckpointReader& reader, const std::string& out_path, DType dtype,
                                const ProgressFn& progress, bool overwrite) {
  MT_REQUIRE(ConfigError, dtype == DType::F32 || dtype == DType::BF16, "export dtype ", dtype_name(dtype),
             ": expected f32 or bf16");
  const fs::path out(out_path);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  MT_REQUIRE(CheckpointError, !fs::is_directory(out, ec), "export: --out ", out_path,
             " is a directory; give the file to write, e.g. ", (out / "model.safetensors").string());
  MT_REQUIRE(CheckpointError, !inside_checkpoint(dir.string()), "export: --out ", out_path,
             " lies inside a checkpoint directory; write the deployment artifact elsewhere");
  for (const fs::path& f : {out, dir / "config.json"})
    MT_REQUIRE(CheckpointError, overwrite || !fs::exists(fs::symlink_status(f, ec)), "export: ", f.string(),
               " already exists; pass --force to replace it");
  const model::ModelConfig cfg = model_config_of(reader);
  ExportResult r;
  r.arch = hf_arch_for(cfg);  // fails before anything is written
  const std::vector<NamedTensor> hf = to_hf_tensors(cfg, read_param_values(reader, cfg, progress));
  std::vector<std::vector<uint16_t>> halves;  // bf16 copies, alive until written
  halves.reserve(hf.size());
  std::vector<SafetensorsTensor> views;
  for (const auto& t : hf) {
    if (dtype == DType::BF16) {
      auto& h = halves.emplace_back(t.values.size());
      convert(t.values.data(), DType::F32, h.data(), DType::BF16, t.values.size());
      views.push_back({t.name, DType::BF16, t.shape, h.data()});
    } else {
      views.push_back({t.name, DType::F32, t.shape, t.values.data()});
    }
    r.bytes += t.values.size() * dtype_size(dtype);
  }
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"meshtrain.model_config", model_config_to_json(cfg).dump()},
                                             {"meshtrain.step", std::to_string(reader.step())}};
  if (reader.metadata().contains(kMetaTokenizer)) meta["meshtrain.tokenizer"] = reader.metadata()[kMetaTokenizer].dump();
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  if (progress) progress("writing", 0, 1);
  write_safetensors(out_path, views, meta);
  r.safetensors_path = out_path;
  nlohmann::json hf_cfg = hf_config_json(cfg);
  hf_cfg["torch_dtype"] = dtype == DType::BF16 ? "bfloat16" : "float32";
  if (reader.metadata().contains(kMetaTokenizer))
    r.tokenizer_path = write_tokenizer_files(reader.metadata()[kMetaTokenizer], dir, &hf_cfg);
  atomic_write_file(dir, "config.json", hf_cfg.dump(2) + "\n");
  r.config_path = (dir / "config.json").string();
  r.tensors = hf.size();
  return r;
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
