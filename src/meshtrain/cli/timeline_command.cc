// meshtrain timeline RUN_DIR [--step K] [--out FILE.svg] [--force]
#include <cstdio>

#include "meshtrain/app/timeline.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "timeline",
                          "draw a recorded pipeline timeline (metrics.pipeline_timeline = true) as SVG; measured "
                          "bubble vs the schedule's formula and the costed simulation",
                          "meshtrain timeline runs/pp2 --out runs/pp2/timeline.svg");
  auto q = std::make_shared<app::TimelineRequest>();
  cmd->add_option("RUN_DIR", q->run_dir, "metrics.run_dir of the run")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--step", q->step, "the recorded step to draw (default: the latest)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--out", q->out, "the SVG file to write (default: RUN_DIR/timeline-stepK.svg)");
  cmd->add_flag("--force", q->force, "replace the output file when it exists");
  cmd->callback([q, &action] {
    action = [q] {
      const app::TimelineResult r = app::timeline(*q);
      std::fputs(r.summary.c_str(), stdout);
      std::printf("wrote %s\n", r.out.c_str());
      return 0;
    };
  });
}

const bool registered = register_command(75, setup);

}  // namespace
}  // namespace meshtrain::cli
