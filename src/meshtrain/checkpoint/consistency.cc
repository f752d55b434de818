#include "meshtrain/checkpoint/consistency.h"

#include <map>

#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::checkpoint {

void check_metadata_consistency(const Manifest& m, const std::string& source) {
  const nlohmann::json& meta = m.metadata;
  if (meta.contains("step")) {
    const auto& s = meta["step"];
    MT_REQUIRE(CheckpointError, s.is_number_integer() && s.get<int64_t>() == m.step, "checkpoint ", source,
               ": metadata.step = ", s.dump(), " but the manifest's step is ", m.step, " (tampered metadata)");
  }
  if (!meta.contains(kMetaModelConfig)) return;
  model::ModelConfig cfg;
  try {
    cfg = model_config_from_json(meta[kMetaModelConfig]);
  } catch (const Error& e) {
    MT_THROW(CheckpointError, "checkpoint ", source, ": metadata.", kMetaModelConfig, " is invalid: ", e.what());
  }
  const model::ModelSpec spec = model::build_model_spec(cfg);
  std::map<std::string, const model::ParamSpec*> params;
  for (const auto& p : spec.params) params[p.name] = &p;
  auto shape_of = [&](const std::string& name) -> const Shape* {
    const TensorEntry* t = m.find(name);
    return t ? &t->shape : nullptr;
  };
  for (const auto& [name, p] : params) {
    const Shape* s = shape_of(name);
    MT_REQUIRE(CheckpointError, s != nullptr, "checkpoint ", source, ": the model in metadata.", kMetaModelConfig,
               " (", cfg.describe(), ") has parameter '", name, "', which the checkpoint does not store");
    MT_REQUIRE(CheckpointError, *s == p->shape, "checkpoint ", source, ": tensor '", name, "' is ", s->str(),
               " but metadata.", kMetaModelConfig, " (", cfg.describe(), ") makes it ", p->shape.str());
  }
  for (const auto& t : m.tensors) {
    std::string param = t.name;
    for (const char* prefix : {kExpAvgPrefix, kExpAvgSqPrefix})
      if (t.name.rfind(prefix, 0) == 0) param = t.name.substr(std::string(prefix).size());
    auto it = params.find(param);
    MT_REQUIRE(CheckpointError, it != params.end(), "checkpoint ", source, ": tensor '", t.name,
               "' is not part of the model metadata.", kMetaModelConfig, " describes (", cfg.describe(), ")");
    MT_REQUIRE(CheckpointError, t.shape == it->second->shape, "checkpoint ", source, ": tensor '", t.name, "' is ",
               t.shape.str(), " but its parameter is ", it->second->shape.str());
  }
}

}  // namespace meshtrain::checkpoint
