#include "meshtrain/checkpoint/model_weights.h"

#include <filesystem>

#include "meshtrain/checkpoint/dtype_convert.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

using model::ModelConfig;

ParamValues read_param_values(const CheckpointReader& reader, const ModelConfig& cfg, const ProgressFn& progress) {
  const model::ModelSpec spec = model::build_model_spec(cfg);
  for (const auto& p : spec.params) {
    const TensorEntry& t = reader.tensor(p.name);
    MT_REQUIRE(CheckpointError, t.shape == p.shape, "checkpoint ", reader.directory().string(), ": parameter '", p.name,
               "' has shape ", t.shape.str(), ", the model needs ", p.shape.str(), " (shape mismatch)");
    MT_REQUIRE(CheckpointError, t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F64,
               "checkpoint parameter '", p.name, "' has non-float dtype ", dtype_name(t.dtype));
  }
  ParamValues out;
  for (const auto& p : spec.params) {
    auto& v = out[p.name];
    v.resize(size_t(p.numel()));
    reader.read_all(p.name, v.data(), DType::F32);
    if (progress) progress("reading", int64_t(out.size()), int64_t(spec.params.size()));
  }
  return out;
}

ParamValues read_param_values(const SafetensorsReader& file, const ModelConfig& cfg) {
  std::map<std::string, NamedTensor> tensors;
  for (const auto& e : file.header().entries) tensors[e.name] = {e.name, e.shape, file.read_f32(e.name)};
  return from_hf_tensors(cfg, tensors);
}

ParamValues param_values(model::ParameterStore& store) {
  ParamValues out;
  for (int i = 0; i < store.size(); ++i) {
    const auto& p = store.get(i);
    out[p.spec->name] = to_vector<float>(p.value);
  }
  return out;
}

void set_param_values(model::ParameterStore& store, const ParamValues& values) {
  for (int i = 0; i < store.size(); ++i) {
    const auto& p = store.get(i);
    auto it = values.find(p.spec->name);
    MT_REQUIRE(CheckpointError, it != values.end(), "weights: parameter '", p.spec->name, "' missing");
    MT_REQUIRE(CheckpointError, int64_t(it->second.size()) == p.value.numel(), "weights: parameter '", p.spec->name,
               "' has ", it->second.size(), " values, expected ", p.value.numel());
  }
  for (int i = 0; i < store.size(); ++i) {
    const auto& p = store.get(i);
    const auto& v = values.at(p.spec->name);
    convert(v.data(), DType::F32, p.value.raw(), p.value.dtype(), v.size());  // f64 under the fp64 policy
  }
}

void load_parameters(const CheckpointReader& reader, model::ParameterStore& store) {
  // Check all shapes before the first copy, then read straight into the views.
  for (int i = 0; i < store.size(); ++i) {
    const auto& p = store.get(i);
    const TensorEntry& t = reader.tensor(p.spec->name);
    MT_REQUIRE(CheckpointError, t.shape == p.spec->shape, "checkpoint ", reader.directory().string(), ": parameter '",
               p.spec->name, "' has shape ", t.shape.str(), ", the model needs ", p.spec->shape.str(),
               " (shape mismatch)");
  }
  for (int i = 0; i < store.size(); ++i) {
    const auto& p = store.get(i);
    reader.read_all(p.spec->name, p.value.raw(), p.value.dtype());
  }
}

void load_model_weights(const CheckpointReader& reader, model::Transformer& model) {
  load_parameters(reader, model.params());
}

void load_model_weights(const SafetensorsReader& file, model::Transformer& model) {
  set_param_values(model.params(), read_param_values(file, model.config()));
}

ModelConfig model_config_of(const CheckpointReader& reader) {
  const auto& meta = reader.metadata();
  MT_REQUIRE(CheckpointError, meta.contains(kMetaModelConfig), "checkpoint ", reader.directory().string(),
             " has no metadata.", kMetaModelConfig, " (written by the trainer)");
  return model_config_from_json(meta[kMetaModelConfig]);
}

ModelConfig model_config_of(const SafetensorsReader& file) {
  const std::filesystem::path cfg_path = std::filesystem::path(file.path()).parent_path() / "config.json";
  std::error_code ec;
  MT_REQUIRE(CheckpointError, std::filesystem::exists(cfg_path, ec), "no config.json beside ", file.path(),
             " (the model config is needed to import it)");
  nlohmann::json hf;
  try {
    hf = nlohmann::json::parse(read_text_file(cfg_path, size_t(16) << 20));
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(CheckpointError, cfg_path.string(), " is not valid JSON: ", e.what());
  }
  ModelConfig cfg = model_config_from_hf(hf);
  auto it = file.metadata().find("meshtrain.model_config");
  if (it != file.metadata().end()) {
    // Our own export: take the fields HF does not carry.
    ModelConfig ours;
    try {
      ours = model_config_from_json(nlohmann::json::parse(it->second));
    } catch (const nlohmann::json::exception& e) {
      MT_THROW(CheckpointError, file.path(), ": __metadata__ meshtrain.model_config is not valid JSON");
    }
    cfg.init_std = ours.init_std;
    cfg.seed = ours.seed;
  }
  return cfg;
}

}  // namespace meshtrain::checkpoint
