#include "meshtrain/train/toml_reader.h"

#include <limits>

namespace meshtrain::train {

const toml::node* TomlSection::get(const char* key) {
  known_.insert(key);
  return table_ ? table_->get(key) : nullptr;
}

void TomlSection::wrong_type(const char* key, const char* expected) const {
  MT_THROW(ConfigError, path_, ".", key, ": expected ", expected);
}

void TomlSection::read(const char* key, int64_t& out) {
  if (const toml::node* n = get(key)) {
    if (!n->is_integer()) wrong_type(key, "an integer");
    out = n->as_integer()->get();
  }
}

void TomlSection::read(const char* key, uint64_t& out) {
  int64_t v = int64_t(out);
  read(key, v);
  if (v < 0) MT_THROW(ConfigError, path_, ".", key, " = ", v, ": expected a non-negative integer");
  out = uint64_t(v);
}

void TomlSection::read(const char* key, int& out) {
  int64_t v = out;
  read(key, v);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    MT_THROW(ConfigError, path_, ".", key, " = ", v, ": out of range");
  out = int(v);
}

void TomlSection::read(const char* key, double& out) {
  if (const toml::node* n = get(key)) {
    if (n->is_floating_point()) out = n->as_floating_point()->get();
    else if (n->is_integer()) out = double(n->as_integer()->get());
    else wrong_type(key, "a number");
  }
}

void TomlSection::read(const char* key, bool& out) {
  if (const toml::node* n = get(key)) {
    if (!n->is_boolean()) wrong_type(key, "true or false");
    out = n->as_boolean()->get();
  }
}

void TomlSection::read(const char* key, std::string& out) {
  if (const toml::node* n = get(key)) {
    if (!n->is_string()) wrong_type(key, "a string");
    out = n->as_string()->get();
  }
}

void TomlSection::read(const char* key, std::vector<std::string>& out) {
  if (const toml::node* n = get(key)) {
    // A bare string is not taken as a list of one: said, not guessed.
    if (n->is_string())
      MT_THROW(ConfigError, path_, ".", key, " = \"", n->as_string()->get(), "\": expected an array of strings, e.g. [\"",
               n->as_string()->get(), "\"]");
    if (!n->is_array()) wrong_type(key, "an array of strings");
    out.clear();
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_string()) wrong_type(key, "an array of strings");
      out.push_back(e.as_string()->get());
    }
  }
}

void TomlSection::read(const char* key, std::vector<int64_t>& out) {
  if (const toml::node* n = get(key)) {
    if (!n->is_array()) wrong_type(key, "an array of integers");
    out.clear();
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_integer()) wrong_type(key, "an array of integers");
      out.push_back(e.as_integer()->get());
    }
  }
}

void TomlSection::finish() const {
  if (!table_) return;
  for (const auto& [k, v] : *table_) {
    const std::string key(k.str());
    if (known_.count(key)) continue;
    std::string allowed;
    for (const auto& kk : known_) allowed += (allowed.empty() ? "" : ", ") + kk;
    MT_THROW(ConfigError, "unknown key ", path_, ".", key, " (known keys of [", path_, "]: ", allowed, ")");
  }
}

void apply_override(toml::table& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  MT_REQUIRE(ConfigError, eq != std::string::npos && eq > 0, "--set '", assignment,
             "': expected section.key=value");
  const std::string path = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  const auto dot = path.find('.');
  MT_REQUIRE(ConfigError, dot != std::string::npos && dot > 0 && dot + 1 < path.size(), "--set '", assignment,
             "': the key must be section.key");
  const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};  // a bare word is a string
  }
  if (!root.contains(section)) root.insert(section, toml::table{});
  toml::table* t = root[section].as_table();
  MT_REQUIRE(ConfigError, t != nullptr, "--set ", path, ": [", section, "] is not a table");
  t->insert_or_assign(key, *parsed.get("v"));
}

}  // namespace meshtrain::train
