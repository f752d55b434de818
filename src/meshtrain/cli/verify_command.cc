// meshtrain verify CONFIG.toml --layout dp=4,zero=3 [--steps K] [--tolerance T | --bitwise] [--set k=v ...]
#include <cstdio>

#include "meshtrain/app/training.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "verify", "compare a parallel layout with the single-rank run, step by step",
                          "meshtrain verify configs/demo.toml --layout dp=4,zero=3 --steps 3");
  auto q = std::make_shared<app::VerifyRequest>();
  cmd->add_option("CONFIG", q->config, "training config (TOML)")->required();
  cmd->add_option("--layout", q->layout, "the layout to check, e.g. dp=4,zero=3")->required();
  cmd->add_option("--steps", q->steps, "updates to compare")->check(CLI::Range(1, 1000000));
  auto* tol = cmd->add_option("--tolerance", q->tolerance,
                              "largest relative difference accepted, per tensor (default by training.precision: fp64 "
                              "1e-10, fp32 5e-4, bf16/fp16 5e-2)")
                  ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--bitwise", q->bitwise, "require identical bits (with training.reproducible = true)")->excludes(tol);
  cmd->add_option("--set", q->overrides, "override a config key (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  cmd->callback([q, &action] {
    action = [q] {
      const app::VerifyResult r = app::verify(*q);
      std::fputs(r.report.c_str(), stdout);
      return r.pass ? 0 : 1;
    };
  });
}

const bool registered = register_command(20, setup);

}  // namespace
}  // namespace meshtrain::cli
