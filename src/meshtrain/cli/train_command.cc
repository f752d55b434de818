// meshtrain train CONFIG.toml [--set section.key=value ...] [--max-restarts N] [--elastic [--min-ranks M]]
#include "meshtrain/app/training.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "train", "train a model from a TOML config (resumes from its run_dir)",
                          "meshtrain train configs/demo.toml --set training.steps=100 --set metrics.run_dir=runs/short");
  auto q = std::make_shared<app::TrainRequest>();
  cmd->add_option("CONFIG", q->config, "training config (TOML; see configs/demo.toml)")->required();
  cmd->add_option("--set", q->overrides, "override a config key, e.g. --set parallel.dp=2 (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  add_restart_options(cmd, q->max_restarts, q->elastic, q->min_ranks);
  cmd->callback([q, &action] { action = [q] { return app::train(*q); }; });
}

const bool registered = register_command(10, setup);

}  // namespace
}  // namespace meshtrain::cli
