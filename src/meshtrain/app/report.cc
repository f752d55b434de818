#include "meshtrain/app/report.h"

#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/core/output_file.h"
#include "meshtrain/report/html_report.h"

namespace meshtrain::app {

ReportSummary write_report(const std::vector<std::string>& run_dirs, const std::string& out, bool force) {
  MT_REQUIRE(ConfigError, !run_dirs.empty(), "report needs at least one RUN_DIR");
  std::vector<std::string> inputs;
  for (const auto& dir : run_dirs) inputs.push_back((std::filesystem::path(dir) / "metrics.jsonl").string());
  check_output_file(out, inputs, force, "--force");  // before any work
  std::vector<report::RunLog> runs;
  ReportSummary s;
  for (const auto& dir : run_dirs) {
    runs.push_back(report::read_run(dir));
    s.steps += int64_t(runs.back().steps.size());
  }
  // Two runs whose directories end in the same name get their paths as labels.
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = 0; j < runs.size(); ++j)
      if (i != j && runs[i].name == runs[j].name) runs[i].name = runs[i].dir;
  const std::string html = report::render_report(runs);
  write_file_atomically(out, html);
  s.out = out;
  s.runs = int(runs.size());
  s.bytes = html.size();
  return s;
}

}  // namespace meshtrain::app
