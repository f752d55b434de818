// Small inline SVG charts for the run report: line plots with axes, ticks
// and a legend, grouped bars, and a timeline. Output is well-formed XML
// (it is embedded in an XHTML page) and needs no script or font download.
#pragma once

#include <string>
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
};

std::string render(const LinePlot& plot);
std::string render(const BarChart& chart);
std::string render(const Timeline& timeline);

std::string xml_escape(const std::string& text);
// "1.5k", "2.3M", "0.0012", "12.5": short labels for ticks.
std::string short_number(double v);
const char* palette(int i);

}  // namespace meshtrain::report
