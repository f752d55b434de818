// Small inline SVG charts for the run report: line plots with axes, ticks
// and a legend, grouped bars, and a timeline. Output is well-formed XML
// (it is embedded in an XHTML page) and needs no script or font download.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace meshtrain::report {

struct Series {
  std::string label;
  std::vector<double> x, y;
  int color = 0;        // palette index (one per run)
  bool dashed = false;  // e.g. validation next to training
  bool markers = false;
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool log_y = false;
  bool percent = false;  // a share: the y axis runs from 0 to 100
};

struct BarGroup {
  std::string label;           // a category
  std::vector<double> values;  // one per bar series
};
struct BarChart {
  std::string title, y_label;
  std::vector<std::string> bar_labels;  // one per value in a group (runs)
  std::vector<BarGroup> groups;
  bool bytes = false;  // format values as sizes
};

struct TimelineSpan {
  int lane = 0;  // e.g. pipeline stage
  double start = 0, end = 0;
  std::string label;  // e.g. "F3"
  int color = 0;
};
struct Timeline {
  std::string title, lane_prefix, x_label;
  int lanes = 0;
  std::vector<TimelineSpan> spans;
  std::vector<std::pair<std::string, int>> legend;  // what each span color means
};

std::string render(const LinePlot& plot);
std::string render(const BarChart& chart);
std::string render(const Timeline& timeline);

std::string xml_escape(const std::string& text);
// <td>text</td>, the text escaped: a table cell of the report.
std::string table_cell(const std::string& text);
// "1.5k", "2.3M", "0.0012", "12.5": short labels for ticks, with `digits`
// significant digits.
std::string short_number(double v, int digits = 3);
// Labels for ascending, evenly spaced tick values: short_number with the
// digits the step needs (3 at least), more while two labels read the same.
std::vector<std::string> tick_labels(const std::vector<double>& ticks);
// Tick values for a byte axis from 0 to `top`: round numbers of one binary
// unit (B, KiB, MiB, GiB, TiB), with their labels ("0", "50 MiB", ...).
std::vector<std::pair<double, std::string>> byte_ticks(double top);
const char* palette(int i);

}  // namespace meshtrain::report
