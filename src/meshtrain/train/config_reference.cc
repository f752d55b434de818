#include "meshtrain/train/config_reference.h"

#include <sstream>
#include <type_traits>

#include "meshtrain/model/model_config_fields.h"

namespace meshtrain::train {
namespace {

template <typename T>
std::string type_name() {
  if constexpr (std::is_enum_v<T>) {
    std::string s;
    for (const auto& [name, value] : model::EnumNames<T>::list) s += std::string(s.empty() ? "" : " \\| ") + name;
    return s;
  } else if constexpr (std::is_same_v<T, bool>) {
    return "boolean";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "number";
  } else if constexpr (std::is_integral_v<T>) {
    return std::is_unsigned_v<T> ? "integer >= 0" : "integer";
  } else {
    return "list of integers";
  }
}

template <typename T>
std::string value_text(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_enum_v<T>) {
    os << '"' << model::to_string(v) << '"';
  } else if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_arithmetic_v<T>) {
    os << v;
  } else {
    os << '[';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << ']';
  }
  return os.str();
}

std::string hf_names(const model::FieldInfo& f) {
  std::string s;
  auto add = [&](const char* name, const char* arch) {
    if (name) s += std::string(s.empty() ? "" : ", ") + "`" + name + "` (" + arch + ")";
  };
  add(f.hf_llama, "Llama, Mixtral");
  add(f.hf_mixtral, "Mixtral");
  add(f.hf_gpt2, "GPT-2");
  return s.empty() ? "—" : s;
}

}  // namespace

std::string config_reference_markdown() {
  std::ostringstream md;
  md << "# Configuration keys\n\n"
     << "<!-- Generated from src/meshtrain/model/model_config_fields.h; do not edit by hand.\n"
     << "     tests/train/config_reference_test.cc fails when this file differs and writes the\n"
     << "     expected text to its temporary directory (copy it here). -->\n\n"
     << "A run's TOML config has the sections `[model]`, `[data]`, `[training]`, `[optimizer]`,\n"
     << "`[metrics]`, `[parallel]`, `[comm]` and `[checkpoint]`; every key is checked (an unknown\n"
     << "key or a wrong type is an error naming it) and any key can be set on the command line\n"
     << "with `--set section.key=value` (docs/cli.md). This page lists the `[model]` keys, which\n"
     << "are also the fields of a checkpoint's `model_config` metadata and, where a Hugging Face\n"
     << "name is given, of an exported `config.json` (docs/checkpoints.md).\n\n"
     << "## [model]\n\n"
     << "| key | type | default | meaning | Hugging Face config.json |\n"
     << "|---|---|---|---|---|\n";
  const model::ModelConfig defaults;
  model::for_each_model_field(defaults, [&](const model::FieldInfo& f, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    md << "| `" << f.key << "` | " << type_name<T>() << " | `" << value_text(v) << "` | " << f.doc << " | "
       << hf_names(f) << " |\n";
  });
  return md.str();
}

}  // namespace meshtrain::train
