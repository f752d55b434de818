#include "meshtrain/checkpoint/model_config_json.h"

#include <type_traits>

#include "meshtrain/core/error.h"
#include "meshtrain/model/model_config_fields.h"

namespace meshtrain::checkpoint {

using nlohmann::json;
using model::ModelConfig;

json model_config_to_json(const ModelConfig& c) {
  json j = json::object();
  model::for_each_model_field(c, [&](const model::FieldInfo& f, const auto& v) {
    if constexpr (std::is_enum_v<std::decay_t<decltype(v)>>) j[f.key] = model::to_string(v);
    else j[f.key] = v;
  });
  return j;
}

namespace {

template <typename T>
void take(const json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  if constexpr (std::is_enum_v<T>) {
    MT_REQUIRE(CheckpointError, it->is_string(), "model config: '", key, "' is not a string");
    const std::string s = it->get<std::string>();
    std::string allowed;
    for (const auto& [name, value] : model::EnumNames<T>::list) {
      if (s == name) {
        out = value;
        return;
      }
      allowed += std::string(allowed.empty() ? "" : " or ") + name;
    }
    MT_THROW(CheckpointError, "model config: '", key, "' = '", s, "' (expected ", allowed, ")");
  } else {
    try {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        MT_REQUIRE(CheckpointError, it->is_number_integer(), "model config: '", key, "' is not an integer");
      }
      if constexpr (std::is_same_v<T, bool>) {
        MT_REQUIRE(CheckpointError, it->is_boolean(), "model config: '", key, "' is not a boolean");
      }
      out = it->get<T>();
    } catch (const json::exception& e) {
      MT_THROW(CheckpointError, "model config: '", key, "' has the wrong type: ", e.what());
    }
  }
}

}  // namespace

ModelConfig model_config_from_json(const json& j) {
  MT_REQUIRE(CheckpointError, j.is_object(), "model config is not a JSON object");
  const json known = model_config_to_json(ModelConfig{});
  for (const auto& [k, v] : j.items())
    MT_REQUIRE(CheckpointError, known.contains(k), "model config: unknown key '", k, "'");
  ModelConfig c;
  model::for_each_model_field(c, [&](const model::FieldInfo& f, auto& v) { take(j, f.key, v); });
  try {
    c.finalize();
  } catch (const ConfigError& e) {
    throw CheckpointError(std::string("model config in checkpoint is invalid: ") + e.what());
  }
  return c;
}

}  // namespace meshtrain::checkpoint
