// meshtrain plan CONFIG.toml [--layout dp=2,zero=1,tp=2,pp=2,...] [--set k=v ...]
#include <cstdio>

#include "meshtrain/app/plan.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "plan", "where every parameter's state lives and the bytes per rank (nothing runs)",
                          "meshtrain plan configs/demo.toml --layout dp=2,zero=1,tp=2,pp=2");
  auto q = std::make_shared<app::PlanRequest>();
  cmd->add_option("CONFIG", q->config, "training config (TOML)")->required();
  cmd->add_option("--layout", q->layout, "the layout to plan; default: the config's [parallel] section");
  cmd->add_option("--set", q->overrides, "override a config key (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  cmd->callback([q, &action] {
    action = [q] {
      std::fputs(app::plan(*q).c_str(), stdout);
      return 0;
    };
  });
}

const bool registered = register_command(25, setup);

}  // namespace
}  // namespace meshtrain::cli
