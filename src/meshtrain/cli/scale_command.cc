// meshtrain scale CONFIG.toml --layouts dp=1 dp=2 dp=4 [--steps K] [--weak] [--threads-per-rank N] [--hardware FILE]
//                             [--out DIR] [--set k=v ...]
#include <cstdio>

#include "meshtrain/app/scale.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "scale",
                          "a short strong- or weak-scaling series on this machine: tokens/s, efficiency "
                          "(docs/math.md (M.68)), peak memory, exposed communication, with an SVG chart",
                          "meshtrain scale configs/demo.toml --layouts dp=1 dp=2 dp=4 --steps 3");
  auto q = std::make_shared<app::ScaleRequest>();
  cmd->add_option("CONFIG", q->config, "training config (TOML)")->required();
  cmd->add_option("--layouts", q->layouts, "the layouts of the series (the smallest that runs is the baseline)")
      ->required()
      ->type_name("LAYOUT ...");
  cmd->add_option("--steps", q->steps, "measured steps per layout, after one warm-up step")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--weak", q->weak, "weak scaling: each replica keeps the config's micro-batch and accumulation");
  cmd->add_option("--threads-per-rank", q->threads_per_rank,
                  "a device is this many compute threads (a layout of D ranks uses D times as many); 0: every "
                  "layout computes on the same threads, the cores this process may use")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--hardware", q->hardware, "machine profile: the predicted step beside the measured one");
  cmd->add_option("--out", q->out, "directory for scaling.svg and scaling.json; default: <metrics.run_dir>/scale");
  cmd->add_option("--set", q->overrides, "override a config key (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  cmd->callback([q, &action] {
    action = [q] {
      const app::ScaleResult r = app::scale(*q);
      std::fputs(r.table.c_str(), stdout);
      std::printf("wrote %s/scaling.svg and %s/scaling.json\n", r.out.c_str(), r.out.c_str());
      return r.any_ran ? 0 : 1;
    };
  });
}

const bool registered = register_command(22, setup);

}  // namespace
}  // namespace meshtrain::cli
