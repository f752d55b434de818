// meshtrain report RUN_DIR... [--out report.html] [--force]
#include <cstdio>

#include "meshtrain/app/report.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "report", "one self-contained HTML page with plots of one or more runs",
                          "meshtrain report runs/dp1 runs/dp2 --out runs/compare.html");
  auto dirs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>("report.html");
  cmd->add_option("RUN_DIR", *dirs, "metrics.run_dir of each run; several overlay their curves")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto force = std::make_shared<bool>(false);
  cmd->add_option("--out", *out, "the HTML file to write (never a run's metrics)");
  cmd->add_flag("--force", *force, "replace the output file when it exists");
  cmd->callback([dirs, out, force, &action] {
    action = [dirs, out, force] {
      const app::ReportSummary s = app::write_report(*dirs, *out, *force);
      std::printf("wrote %s: %d run(s), %lld steps, %zu bytes\n", s.out.c_str(), s.runs, (long long)s.steps,
                  s.bytes);
      return 0;
    };
  });
}

const bool registered = register_command(70, setup);

}  // namespace
}  // namespace meshtrain::cli
