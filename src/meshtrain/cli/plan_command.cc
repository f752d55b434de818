// meshtrain plan CONFIG.toml [--layout dp=2,zero=1,tp=2,pp=2,...] [--set k=v ...] [--hardware FILE] [--json]
//                            [--devices D] [--nodes N]
// meshtrain plan --params N --precision fp32|bf16|fp16-mixed [--layout dp=R,zero=S] [--activations B] ...
// meshtrain plan --published megatron-2021|megatron-core-175b --hardware FILE
#include <cstdio>

#include "meshtrain/app/plan.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

// A CLI11 check with the planner's own parser (the same error text as a
// hardware file's field), so a bad size is a usage error naming the option.
CLI::Validator parsed_by(double (*parse)(const std::string&, const std::string&), const std::string& option,
                         const std::string& type) {
  return CLI::Validator(
      [parse, option](std::string& text) -> std::string {
        try {
          parse(text, option);
          return "";
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      type);
}

// The config-free options as typed; converted once the parse succeeded.
struct SeedText {
  std::string params, activations, workspace, gathered, prefetch, device_memory, activation_unit, scaling;
  int recompute_layers = 0, pipeline_stages = 0;
  double target_bubble = 0;
};

void to_seed(const SeedText& t, app::SeedTerms& s) {
  auto bytes = [](const std::string& text, const char* option) {
    return text.empty() ? 0.0 : app::parse_bytes(text, option);
  };
  if (!t.params.empty()) s.params = app::parse_count(t.params, "--params");
  s.activations = bytes(t.activations, "--activations");
  s.workspace = bytes(t.workspace, "--workspace");
  s.gathered = bytes(t.gathered, "--gathered");
  s.prefetch = bytes(t.prefetch, "--prefetch");
  if (!t.device_memory.empty()) s.device_memory = bytes(t.device_memory, "--device-memory");
  if (t.recompute_layers > 0) s.recompute_layers = t.recompute_layers;
  if (!t.activation_unit.empty()) s.activation_unit = bytes(t.activation_unit, "--activation-unit");
  if (t.pipeline_stages > 0) s.pipeline_stages = t.pipeline_stages;
  if (t.target_bubble > 0) s.target_bubble = t.target_bubble;
  if (!t.scaling.empty()) s.scaling = t.scaling;
}

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(
      root, "plan",
      "placements, predicted memory, communication and step time of a layout; docs/math.md's closed forms without a "
      "config (nothing runs)",
      "meshtrain plan configs/demo.toml --layout dp=2,zero=3 --hardware configs/hardware/a100-80gb.toml\n"
      "  meshtrain plan --params 7B --precision bf16 --layout dp=8,zero=3 --activations 10GiB --device-memory 80GiB");
  auto q = std::make_shared<app::PlanRequest>();
  auto seed = std::make_shared<SeedText>();
  cmd->add_option("CONFIG", q->config, "training config (TOML); without one, docs/math.md's closed forms");
  cmd->add_option("--layout", q->layout, "the layout to plan; default: the config's [parallel] section");
  cmd->add_option("--set", q->overrides, "override a config key (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--hardware", q->hardware, "machine profile for the step time (configs/hardware/*.toml)");
  cmd->add_flag("--json", q->json, "the prediction as JSON");
  cmd->add_option("--devices", q->devices, "list every mesh of D devices ranked by predicted step time")
      ->type_name("D")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--nodes", q->nodes,
                  "split the devices over N nodes (D/N each, numbered node by node): groups inside a node priced "
                  "on the profile's [link.intra], across nodes on [link.inter]")
      ->type_name("N")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--published", q->published, "published runs modelled on --hardware, side by side")
      ->check(CLI::IsMember({"megatron-2021", "megatron-core-175b"}));
  const auto size = [](const char* option) { return parsed_by(app::parse_bytes, option, "SIZE"); };
  cmd->add_option("--params", seed->params, "parameters N (plain or 1.7B, 175B)")
      ->check(parsed_by(app::parse_count, "--params", "COUNT"));
  cmd->add_option("--precision", q->seed.precision, "bytes per parameter: fp32 4+4+8, bf16/fp16-mixed 2+2+12")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16-mixed"}));
  cmd->add_option("--activations", seed->activations, "activation bytes per rank (10GiB, ...)")->check(size("--activations"));
  cmd->add_option("--workspace", seed->workspace, "workspace bytes per rank")->check(size("--workspace"));
  cmd->add_option("--gathered", seed->gathered, "ZeRO-3 gathered unit bytes")->check(size("--gathered"));
  cmd->add_option("--prefetch", seed->prefetch, "ZeRO-3 prefetched unit bytes")->check(size("--prefetch"));
  cmd->add_option("--device-memory", seed->device_memory, "memory per device; says whether the peak fits")
      ->check(size("--device-memory"));
  cmd->add_option("--recompute-layers", seed->recompute_layers,
                  "layers L for the checkpoint interval (docs/math.md (M.30))")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--activation-unit", seed->activation_unit, "activation bytes of one layer (docs/math.md (M.30))")
      ->check(size("--activation-unit"));
  cmd->add_option("--pp", seed->pipeline_stages, "pipeline stages p for the smallest m (docs/math.md (M.42)-(M.43))")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--target-bubble", seed->target_bubble,
                  "largest bubble fraction accepted (docs/math.md (M.42)-(M.43))")
      ->check(open_range(0, 1));
  cmd->add_option("--scaling", seed->scaling, "two measured runs: speedup and efficiency (docs/math.md (M.68))")
      ->type_name("t0,D0,t1,D1");
  cmd->callback([q, seed, &action] {
    to_seed(*seed, q->seed);
    action = [q] {
      std::fputs(app::plan(*q).c_str(), stdout);
      return 0;
    };
  });
}

const bool registered = register_command(25, setup);

}  // namespace
}  // namespace meshtrain::cli
