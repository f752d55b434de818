// Strict reading of one TOML table: every key must be known and of the
// expected type; finish() rejects unknown keys. Errors carry the key path
// and the expected value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "meshtrain/core/error.h"

namespace meshtrain::train {

class TomlSection {
 public:
  TomlSection(const toml::table* table, std::string path) : table_(table), path_(std::move(path)) {}

  void read(const char* key, int64_t& out);
  void read(const char* key, uint64_t& out);
  void read(const char* key, int& out);
  void read(const char* key, double& out);
  void read(const char* key, bool& out);
  void read(const char* key, std::string& out);
  void read(const char* key, std::vector<std::string>& out);
  void read(const char* key, std::vector<int64_t>& out);
  template <typename E>
  void read_enum(const char* key, E& out, std::initializer_list<std::pair<const char*, E>> choices) {
    read_enum(key, out, std::span<const std::pair<const char*, E>>(choices.begin(), choices.size()));
  }
  template <typename E>
  void read_enum(const char* key, E& out, std::span<const std::pair<const char*, E>> choices) {
    std::string s;
    bool present = has(key);
    read(key, s);
    if (!present) return;
    std::string allowed;
    for (const auto& [name, value] : choices) {
      if (s == name) {
        out = value;
        return;
      }
      allowed += std::string(allowed.empty() ? "" : ", ") + "\"" + name + "\"";
    }
    MT_THROW(ConfigError, path_, ".", key, " = \"", s, "\": expected one of ", allowed);
  }
  // Throws ConfigError naming the first unknown key and the known ones.
  void finish() const;

 private:
  bool has(const char* key) const { return table_ && table_->contains(key); }
  const toml::node* get(const char* key);
  [[noreturn]] void wrong_type(const char* key, const char* expected) const;
  const toml::table* table_;
  std::string path_;
  std::set<std::string> known_;
};

// Applies "section.key=value" overrides to `root` (value parsed as a TOML
// value; a bare word becomes a string).
void apply_override(toml::table& root, const std::string& assignment);

}  // namespace meshtrain::train
