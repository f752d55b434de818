// The ConfigError message parsing a TOML text (with overrides) gives, or
// "" when the config is valid: for tests of the config rules.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::testing {

inline std::string config_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    train::parse_config(text, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace meshtrain::testing
