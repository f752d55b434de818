// meshtrain scale CONFIG.toml --layouts dp=1 dp=2 dp=4 [--steps K] [--weak] [--hardware FILE] [--out DIR]
//                             [--set k=v ...]
// A short strong- (default) or weak-scaling series on this machine (threads
// backend, train/scaling.h): a table on stdout, scaling.svg and
// scaling.json in --out (default <metrics.run_dir>/scale).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/data_setup.h"
#include "meshtrain/train/scaling.h"
#include "meshtrain/train/scaling_chart.h"

namespace meshtrain::cli {

int cmd_scale(const Args& args) {
  const char* usage =
      "usage: meshtrain scale CONFIG.toml --layouts dp=1 dp=2 ... [--steps K] [--weak] [--hardware FILE] [--out DIR] "
      "[--set k=v ...]";
  std::string config_path, hardware_path, out_dir;
  std::vector<std::string> overrides, layouts;
  int steps = 3;
  bool weak = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      MT_REQUIRE(ConfigError, i + 1 < args.size(), a, " needs a value (", usage, ")");
      return args[++i];
    };
    if (a == "--layouts") {
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) layouts.push_back(args[++i]);
    } else if (a == "--steps") {
      steps = std::stoi(value());
    } else if (a == "--weak") {
      weak = true;
    } else if (a == "--hardware") {
      hardware_path = value();
    } else if (a == "--out") {
      out_dir = value();
    } else if (a == "--set") {
      overrides.push_back(value());
    } else if (!a.empty() && a[0] == '-') {
      MT_THROW(ConfigError, "unknown option '", a, "' (", usage, ")");
    } else {
      config_path = a;
    }
  }
  MT_REQUIRE(ConfigError, !config_path.empty() && !layouts.empty(), usage);
  const train::TrainConfig cfg = train::load_config(config_path, overrides);
  std::vector<train::Layout> parsed;
  for (const std::string& l : layouts) parsed.push_back(train::parse_layout(l));
  std::optional<plan::HardwareProfile> hw;
  if (!hardware_path.empty()) hw = plan::load_hardware(hardware_path);
  train::ensure_prepared(cfg.data);
  const auto data = data::TokenDataset::open(cfg.data.path, "train");
  const train::ScaleReport report = train::run_scaling(cfg, parsed, steps, weak, data, hw ? &*hw : nullptr);
  std::fputs(report.table().c_str(), stdout);
  if (out_dir.empty()) out_dir = cfg.metrics.run_dir + "/scale";
  std::filesystem::create_directories(out_dir);
  std::ofstream(out_dir + "/scaling.svg") << train::scaling_svg(report);
  std::ofstream(out_dir + "/scaling.json") << report.json().dump(2) << "\n";
  std::printf("wrote %s/scaling.svg and %s/scaling.json\n", out_dir.c_str(), out_dir.c_str());
  return report.baseline >= 0 ? 0 : 1;
}

}  // namespace meshtrain::cli
