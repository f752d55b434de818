// meshtrain plan CONFIG.toml [--layout dp=2,zero=1,tp=2,pp=2,...] [--set k=v ...]
// Prints the layout plan: every parameter's placement per mesh axis, its
// local shape on each tensor-parallel rank, the axes its gradient is summed
// over and its bytes per rank, then each rank's persistent bytes. The
// layout defaults to the config's [parallel] section; nothing runs.
#include <cstdio>

#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::cli {

int cmd_plan(const Args& args) {
  const char* usage = "usage: meshtrain plan CONFIG.toml [--layout dp=2,zero=1,tp=2,pp=2,...] [--set k=v ...]";
  std::string config_path, layout_text;
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      MT_REQUIRE(ConfigError, i + 1 < args.size(), a, " needs a value (", usage, ")");
      return args[++i];
    };
    if (a == "--layout") layout_text = value();
    else if (a == "--set") overrides.push_back(value());
    else if (!a.empty() && a[0] == '-') MT_THROW(ConfigError, "unknown option '", a, "' (", usage, ")");
    else config_path = a;
  }
  MT_REQUIRE(ConfigError, !config_path.empty(), usage);
  const train::TrainConfig cfg = train::load_config(config_path, overrides);
  train::Layout layout = train::parse_layout(
      "dp=" + std::to_string(cfg.parallel.dp == 0 ? 1 : cfg.parallel.dp) + ",zero=" + std::to_string(cfg.parallel.zero_stage));
  if (!layout_text.empty()) layout = train::parse_layout(layout_text);
  std::fputs(parallel::plan_table(cfg.model, layout.mesh(), layout.options(),
                                  cfg.precision())
                 .c_str(),
             stdout);
  return 0;
}

}  // namespace meshtrain::cli
