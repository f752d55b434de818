#include "meshtrain/app/report.h"

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/report/html_report.h"

namespace meshtrain::app {

ReportSummary write_report(const std::vector<std::string>& run_dirs, const std::string& out) {
  MT_REQUIRE(ConfigError, !run_dirs.empty(), "report needs at least one RUN_DIR");
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
  const std::filesystem::path path(out);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  const std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << html;
    f.close();
    MT_REQUIRE(DataError, f.good(), "cannot write ", tmp);
  }
  std::filesystem::rename(tmp, out);
  s.out = out;
  s.runs = int(runs.size());
  s.bytes = html.size();
  return s;
}

}  // namespace meshtrain::app
