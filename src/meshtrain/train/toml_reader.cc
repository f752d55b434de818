#include "meshtrain/train/toml_reader.h"

#include <limits>

#include "meshtrain/core/suggest.h"

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
    MT_THROW(ConfigError, "unknown key ", path_, ".", key,
             did_you_mean(key, std::vector<std::string>(known_.begin(), known_.end())), " (known keys of [", path_,
             "]: ", allowed, ")");
  }
}

namespace {

// Without the spaces and tabs around it ("a.b = 5" sets a.b to 5).
std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

}  // namespace

void apply_override(toml::table& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  const std::string path = trimmed(assignment.substr(0, eq == std::string::npos ? 0 : eq));
  MT_REQUIRE(ConfigError, eq != std::string::npos && !path.empty(), "--set '", assignment,
             "': expected section.key=value");
  const std::string value = trimmed(assignment.substr(eq + 1));
  const auto dot = path.find('.');
  const std::string section = trimmed(path.substr(0, dot)), key = dot == std::string::npos ? "" : trimmed(path.substr(dot + 1));
  MT_REQUIRE(ConfigError, !section.empty() && !key.empty(), "--set '", assignment, "': the key must be section.key");
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
