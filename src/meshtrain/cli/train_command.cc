// meshtrain train CONFIG.toml [--set section.key=value ...]
#include <cstdio>

#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/run.h"

namespace meshtrain::cli {

int cmd_train(const Args& args) {
  std::string config_path;
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") {
      MT_REQUIRE(ConfigError, i + 1 < args.size(), "--set needs section.key=value");
      overrides.push_back(args[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      overrides.push_back(a.substr(6));
    } else if (!a.empty() && a[0] == '-') {
      MT_THROW(ConfigError, "unknown option '", a, "' (usage: meshtrain train CONFIG.toml [--set section.key=value ...])");
    } else {
      MT_REQUIRE(ConfigError, config_path.empty(), "more than one config file given: '", config_path, "' and '", a, "'");
      config_path = a;
    }
  }
  MT_REQUIRE(ConfigError, !config_path.empty(), "usage: meshtrain train CONFIG.toml [--set section.key=value ...]");
  const train::TrainConfig cfg = train::load_config(config_path, overrides);
  train::train_main(cfg);
  return 0;
}

}  // namespace meshtrain::cli
