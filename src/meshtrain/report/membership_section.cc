#include "meshtrain/report/membership_section.h"

#include <cstdio>

#include "meshtrain/report/svg_plot.h"

namespace meshtrain::report {
namespace {

std::string seconds(double s) {
  if (s < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

}  // namespace

std::string membership_section(const std::vector<RunLog>& runs) {
  std::string h;
  bool any = false;
  for (const RunLog& r : runs) {
    if (r.resumes.empty()) continue;
    any = true;
    int64_t lost = 0;
    for (const ResumeRecord& m : r.resumes) lost += m.lost_steps;
    h += "<p>" + xml_escape(r.name) + ": " + std::to_string(r.resumes.size()) + " resume(s), " +
         std::to_string(lost) + " step(s) lost in all.</p>";
    h += "<table><tr><th>resumed at step</th><th>layout from there</th><th>change</th><th>steps lost</th>"
         "<th>ready again after</th><th>why</th></tr>";
    for (const ResumeRecord& m : r.resumes) {
      const std::string layout = m.change.empty()   ? "unchanged"
                                 : !m.layout.empty() ? m.layout
                                                     : std::to_string(m.ranks) + " ranks: dp=" + std::to_string(m.dp) +
                                                           ", grad_accum=" + std::to_string(m.grad_accum);
      h += "<tr>" + table_cell(std::to_string(m.resumed_step)) + table_cell(layout) + table_cell(m.change.empty() ? "-" : m.change) +
           table_cell(std::to_string(m.lost_steps)) + table_cell(seconds(m.recovery_s)) + table_cell(m.reason) + "</tr>";
    }
    h += "</table>";
  }
  return any ? h : "<p class=\"note\">No restarts or membership changes.</p>";
}

}  // namespace meshtrain::report
