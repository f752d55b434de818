// meshtrain verify CONFIG.toml --layout dp=4,zero=3 --steps K [--tolerance T] [--set k=v ...]
#include <cstdio>
#include <string>

#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/equivalence.h"

namespace meshtrain::cli {

int cmd_verify(const Args& args) {
  const char* usage =
      "usage: meshtrain verify CONFIG.toml --layout dp=4,zero=3 [--steps K] [--tolerance T | --bitwise] [--set k=v ...]";
  std::string config_path, layout_text;
  std::vector<std::string> overrides;
  int steps = 3;
  double tolerance = 1e-4;
  bool bitwise = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      MT_REQUIRE(ConfigError, i + 1 < args.size(), a, " needs a value (", usage, ")");
      return args[++i];
    };
    if (a == "--layout") layout_text = value();
    else if (a == "--steps") steps = std::stoi(value());
    else if (a == "--tolerance") tolerance = std::stod(value());
    else if (a == "--set") overrides.push_back(value());
    else if (a == "--bitwise") bitwise = true;
    else if (!a.empty() && a[0] == '-') MT_THROW(ConfigError, "unknown option '", a, "' (", usage, ")");
    else config_path = a;
  }
  MT_REQUIRE(ConfigError, !config_path.empty() && !layout_text.empty(), usage);
  MT_REQUIRE(ConfigError, steps > 0, "--steps must be positive");
  const train::TrainConfig cfg = train::load_config(config_path, overrides);
  train::ensure_prepared(cfg.data);
  const auto data = data::TokenDataset::open(cfg.data.path, "train");
  const auto report = train::compare_with_single_rank(cfg, train::parse_layout(layout_text), steps, data, tolerance,
                                                     bitwise);
  std::fputs(report.str().c_str(), stdout);
  return report.pass() ? 0 : 1;
}

}  // namespace meshtrain::cli
