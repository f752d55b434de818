// `meshtrain report RUN_DIR... [--out report.html]`.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::app {

struct ReportSummary {
  std::string out;
  int runs = 0;
  int64_t steps = 0;
  size_t bytes = 0;
};
// Reads each RUN_DIR/metrics.jsonl and writes one self-contained HTML page
// (core/output_file.h: never over an input, an existing file only with `force`).
ReportSummary write_report(const std::vector<std::string>& run_dirs, const std::string& out, bool force = false);

}  // namespace meshtrain::app
