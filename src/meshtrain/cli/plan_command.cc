// meshtrain plan CONFIG.toml [--layout dp=2,zero=1,tp=2,pp=2,...] [--set k=v ...] [--hardware FILE] [--json]
//                           [--devices D]
// meshtrain plan --params N --precision fp32|bf16|fp16-mixed --layout dp=R,zero=S [--activations B]
//                [--workspace B] [--gathered B] [--prefetch B] [--device-memory B]
//                [--recompute-layers L --activation-unit B] [--pp p --target-bubble F] [--scaling t0,D0,t1,D1]
// With a config: the layout plan table (every parameter's placement, local
// shape, gradient group, bytes per rank), then the planner's prediction per
// rank class (plan/prediction.h); --devices D lists every mesh of D
// devices ranked by predicted step time (with --layout: checks that the
// layout uses D devices). Without one: the seed's formulas
// (plan/seed_terms.h). Nothing runs.
#include <cstdio>

#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/plan/byte_size.h"
#include "meshtrain/plan/mesh_search.h"
#include "meshtrain/plan/plan_report.h"
#include "meshtrain/plan/published_runs.h"
#include "meshtrain/plan/seed_terms.h"
#include "meshtrain/train/plan_inputs.h"

namespace meshtrain::cli {

namespace {

int parse_int(const std::string& option, const std::string& text) {
  size_t pos = 0;
  int v = 0;
  try {
    v = std::stoi(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  MT_REQUIRE(ConfigError, pos == text.size() && !text.empty(), option, " = \"", text, "\": expected an integer");
  return v;
}

double parse_number(const std::string& option, const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  MT_REQUIRE(ConfigError, pos == text.size() && !text.empty(), option, " = \"", text, "\": expected a number");
  return v;
}

}  // namespace

int cmd_plan(const Args& args) {
  const char* usage =
      "usage: meshtrain plan CONFIG.toml [--layout dp=2,zero=1,tp=2,pp=2] [--hardware FILE] [--json] [--devices D] "
      "[--set k=v ...]\n"
      "       meshtrain plan --params N --precision fp32|bf16|fp16-mixed --layout dp=R,zero=S [--activations B] "
      "[--workspace B] [--gathered B] [--prefetch B] [--device-memory B] [--recompute-layers L --activation-unit B] "
      "[--pp p --target-bubble F] [--scaling t0,D0,t1,D1]\n"
      "       meshtrain plan --published megatron-2021|megatron-core-175b --hardware FILE";
  std::string config_path, layout_text, hardware_path;
  std::vector<std::string> overrides;
  bool json = false;
  int devices = 0;
  std::string published;
  plan::SeedTerms seed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      MT_REQUIRE(ConfigError, i + 1 < args.size(), a, " needs a value (", usage, ")");
      return args[++i];
    };
    auto bytes = [&] { return plan::parse_bytes(value(), a); };
    if (a == "--layout") layout_text = value();
    else if (a == "--set") overrides.push_back(value());
    else if (a == "--hardware") hardware_path = value();
    else if (a == "--json") json = true;
    else if (a == "--devices") devices = parse_int(a, value());
    else if (a == "--params") seed.params = plan::parse_count(value(), a);
    else if (a == "--precision") seed.precision = value();
    else if (a == "--activations") seed.activations = bytes();
    else if (a == "--workspace") seed.workspace = bytes();
    else if (a == "--gathered") seed.gathered = bytes();
    else if (a == "--prefetch") seed.prefetch = bytes();
    else if (a == "--device-memory") seed.device_memory = bytes();
    else if (a == "--recompute-layers") seed.recompute_layers = parse_int(a, value());
    else if (a == "--activation-unit") seed.activation_unit = bytes();
    else if (a == "--pp") seed.pipeline_stages = parse_int(a, value());
    else if (a == "--target-bubble") seed.target_bubble = parse_number(a, value());
    else if (a == "--scaling") seed.scaling = value();
    else if (a == "--published") published = value();
    else if (!a.empty() && a[0] == '-') MT_THROW(ConfigError, "unknown option '", a, "' (", usage, ")");
    else config_path = a;
  }
  std::optional<plan::HardwareProfile> hw;
  if (!hardware_path.empty()) hw = plan::load_hardware(hardware_path);

  // A layout given with --devices must use exactly those devices.
  auto check_devices = [&](const train::Layout& layout) {
    const comm::MeshShape m = layout.mesh();
    MT_REQUIRE(ConfigError, devices == 0 || m.world_size() == devices, "--layout ", layout_text, ": pp*dp*cp*tp = ",
               m.pp, "*", m.dp, "*", m.cp, "*", m.tp, " = ", m.world_size(), " devices but --devices is ", devices);
  };
  if (!published.empty()) {
    MT_REQUIRE(ConfigError, hw.has_value(), "--published ", published, " needs --hardware FILE (the machine to model)");
    std::fputs(plan::render_published(plan::published_runs(published), *hw).c_str(), stdout);
    return 0;
  }
  if (config_path.empty()) {
    MT_REQUIRE(ConfigError, devices == 0 || !layout_text.empty(),
               "--devices without --layout lists meshes for a model: give a CONFIG (", usage, ")");
    if (!layout_text.empty()) {
      const train::Layout layout = train::parse_layout(layout_text);
      check_devices(layout);
      seed.dp = layout.dp, seed.zero_stage = layout.zero_stage, seed.tp = layout.tp, seed.pp = layout.pp;
    }
    if (hw && !seed.device_memory) seed.device_memory = hw->memory_bytes;
    std::fputs(plan::seed_terms_report(seed).c_str(), stdout);
    return 0;
  }
  const train::TrainConfig cfg = train::load_config(config_path, overrides);
  train::Layout layout = train::parse_layout(
      "dp=" + std::to_string(cfg.parallel.dp == 0 ? 1 : cfg.parallel.dp) + ",zero=" + std::to_string(cfg.parallel.zero_stage));
  if (!layout_text.empty()) layout = train::parse_layout(layout_text);
  if (!layout_text.empty()) check_devices(layout);
  const plan::StepInputs in = train::step_inputs(cfg, layout);
  if (devices > 0 && layout_text.empty()) {
    const auto candidates = plan::search_meshes(in, devices, hw ? &*hw : nullptr);
    std::fputs(plan::render_search(candidates, devices, hw ? &*hw : nullptr).c_str(), stdout);
    return 0;
  }
  const plan::Prediction p = plan::predict(in, hw ? &*hw : nullptr);
  if (json) {
    std::printf("%s\n", plan::render_json(p).dump(2).c_str());
    return 0;
  }
  std::fputs(parallel::plan_table(cfg.model, layout.mesh(), layout.options(), cfg.precision()).c_str(), stdout);
  std::printf("\n%s", plan::render_text(p).c_str());
  return 0;
}

}  // namespace meshtrain::cli
