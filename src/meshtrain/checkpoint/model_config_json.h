// model::ModelConfig <-> JSON, as stored in checkpoint metadata
// ("model_config") and safetensors __metadata__. Keys are the field names;
// enums are their to_string() names ("rmsnorm", "rope", "swiglu", ...).
#pragma once

#include <nlohmann/json.hpp>

#include "meshtrain/model/model_config.h"

namespace meshtrain::checkpoint {

nlohmann::json model_config_to_json(const model::ModelConfig& cfg);
// Missing keys keep their defaults; unknown keys and bad values are a
// CheckpointError (a typo must not silently change the model). Finalized.
model::ModelConfig model_config_from_json(const nlohmann::json& j);

// Metadata keys this library reads (the trainer writes them).
inline constexpr const char* kMetaModelConfig = "model_config";
inline constexpr const char* kMetaTokenizer = "tokenizer";

}  // namespace meshtrain::checkpoint
