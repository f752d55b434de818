#include "meshtrain/report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>

#include "meshtrain/core/memory_tracker.h"

namespace meshtrain::report {
namespace {

constexpr double kW = 560, kH = 300;                          // canvas
constexpr double kLeft = 64, kRight = 16, kTop = 30, kBottom = 62;  // margins (legend below the x axis)

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// About n round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int n) {
  std::vector<double> t;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string open_svg(const std::string& title, double w = kW, double h = kH) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" width=\"" + fmt(w) + "\" height=\"" + fmt(h) +
         "\" viewBox=\"0 0 " + fmt(w) + " " + fmt(h) + "\" role=\"img\" aria-label=\"" + xml_escape(title) +
         "\"><title>" + xml_escape(title) + "</title><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>" +
         "<text x=\"" + fmt(w / 2) + "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" +
         xml_escape(title) + "</text>";
}

std::string text(double x, double y, const std::string& s, const char* anchor = "middle", int size = 11,
                 const std::string& extra = "") {
  return "<text x=\"" + fmt(x) + "\" y=\"" + fmt(y) + "\" text-anchor=\"" + anchor + "\" font-size=\"" +
         std::to_string(size) + "\"" + extra + ">" + xml_escape(s) + "</text>";
}

// About how wide `s` is drawn in the default sans-serif at `size` px.
double text_width(const std::string& s, int size) { return 0.6 * size * double(s.size()); }

std::string legend(const std::vector<std::pair<std::string, std::pair<int, bool>>>& items, double y, double w) {
  std::string out;
  double x = kLeft;
  for (const auto& [label, style] : items) {
    const double width = 28 + text_width(label, 10) + 14;
    if (x + width > w && x > kLeft) x = kLeft, y += 14;
    out += "<line x1=\"" + fmt(x) + "\" y1=\"" + fmt(y - 4) + "\" x2=\"" + fmt(x + 22) + "\" y2=\"" + fmt(y - 4) +
           "\" stroke=\"" + palette(style.first) + "\" stroke-width=\"2\"" +
           (style.second ? " stroke-dasharray=\"5 3\"" : "") + "/>";
    out += text(x + 26, y, label, "start", 10);
    x += width;
  }
  return out;
}

}  // namespace

const char* palette(int i) {
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  return colors[((i % 8) + 8) % 8];
}

std::string table_cell(const std::string& text) { return "<td>" + xml_escape(text) + "</td>"; }

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // Control characters are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t') out += c;
    }
  }
  return out;
}

std::string short_number(double v, int digits) {
  char buf[48];
  const double a = std::abs(v);
  if (a == 0) return "0";
  if (a >= 1e9) std::snprintf(buf, sizeof buf, "%.*gG", digits, v / 1e9);
  else if (a >= 1e6) std::snprintf(buf, sizeof buf, "%.*gM", digits, v / 1e6);
  else if (a >= 1e4) std::snprintf(buf, sizeof buf, "%.*gk", digits, v / 1e3);
  else if (a >= 1e3 && digits <= 4) std::snprintf(buf, sizeof buf, "%.0f", v);  // "%.3g" would print 3.51e+03
  else std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  // Enough significant digits to show the tick step at the largest tick
  // (41000.5 in steps of 0.5: six), at least 3.
  int digits = 3;
  if (ticks.size() >= 2) {
    double top = 0;
    for (double t : ticks) top = std::max(top, std::abs(t));
    const double step = std::abs(ticks[1] - ticks[0]);
    if (top > 0 && step > 0)
      digits = std::max(digits, int(std::floor(std::log10(top)) - std::floor(std::log10(step) + 1e-9)) + 1);
  }
  std::vector<std::string> labels;
  for (; digits <= 12; ++digits) {
    labels.clear();
    for (double t : ticks) labels.push_back(short_number(t, digits));
    bool distinct = true;
    for (size_t i = 1; i < labels.size(); ++i) distinct = distinct && labels[i] != labels[i - 1];
    if (distinct) break;
  }
  return labels;
}

std::vector<std::pair<double, std::string>> byte_ticks(double top) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && top >= 1024.0 * std::pow(1024.0, u)) ++u;
  const double unit = std::pow(1024.0, u);
  const std::vector<double> t = ticks(0, top / unit, 5);
  const std::vector<std::string> labels = tick_labels(t);
  std::vector<std::pair<double, std::string>> out;
  for (size_t i = 0; i < t.size(); ++i) out.push_back({t[i] * unit, t[i] == 0 ? "0" : labels[i] + " " + units[u]});
  return out;
}

std::string render(const LinePlot& p) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : p.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (p.log_y && s.y[i] <= 0)) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      const double y = p.log_y ? std::log10(s.y[i]) : s.y[i];
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::string out = open_svg(p.title);
  if (!std::isfinite(x0)) return out + text(kW / 2, kH / 2, "no data recorded") + "</svg>";
  if (x1 == x0) {  // one point: a range around it (5%, at least 1), not ticks that all read the same
    const double pad = std::max(1.0, std::abs(x0) * 0.05);
    x0 -= pad, x1 += pad;
  }
  if (p.percent) y0 = 0, y1 = std::max(y1, 100.0);
  if (y1 == y0) y0 -= std::max(1e-9, std::abs(y0) * 0.1), y1 += std::max(1e-9, std::abs(y1) * 0.1);
  if (!p.log_y && y0 > 0 && y0 < 0.25 * y1) y0 = 0;  // start at zero when it costs little resolution
  if (!p.percent) {  // a margin, so the extreme points do not sit on the frame
    const double margin = 0.04 * (y1 - y0);
    y1 += margin;
    if (y0 != 0) y0 -= margin;
  }
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  // Axes, grid and tick labels.
  const std::vector<double> xt = ticks(x0, x1, 6);
  const std::vector<std::string> xl = tick_labels(xt);
  for (size_t i = 0; i < xt.size(); ++i)
    out += "<line x1=\"" + fmt(X(xt[i])) + "\" y1=\"" + fmt(kTop) + "\" x2=\"" + fmt(X(xt[i])) + "\" y2=\"" +
           fmt(kTop + ph) + "\" stroke=\"#eee\"/>" + text(X(xt[i]), kTop + ph + 14, xl[i]);
  std::vector<double> yt = ticks(y0, y1, 5), yv = yt;
  if (p.log_y)
    for (double& v : yv) v = std::pow(10.0, v);
  const std::vector<std::string> yl = tick_labels(yv);
  for (size_t i = 0; i < yt.size(); ++i)
    out += "<line x1=\"" + fmt(kLeft) + "\" y1=\"" + fmt(Y(yt[i])) + "\" x2=\"" + fmt(kLeft + pw) + "\" y2=\"" +
           fmt(Y(yt[i])) + "\" stroke=\"#eee\"/>" + text(kLeft - 4, Y(yt[i]) + 4, yl[i], "end");
  out += "<rect x=\"" + fmt(kLeft) + "\" y=\"" + fmt(kTop) + "\" width=\"" + fmt(pw) + "\" height=\"" + fmt(ph) +
         "\" fill=\"none\" stroke=\"#444\"/>";
  out += text(kLeft + pw / 2, kTop + ph + 28, p.x_label);
  out += text(14, kTop + ph / 2, p.y_label, "middle", 11,
              " transform=\"rotate(-90 14 " + fmt(kTop + ph / 2) + ")\"");
  // Series.
  std::vector<std::pair<std::string, std::pair<int, bool>>> items;
  for (const auto& s : p.series) {
    std::string pts;
    std::string marks;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (p.log_y && s.y[i] <= 0)) continue;
      const double px = X(s.x[i]), py = Y(p.log_y ? std::log10(s.y[i]) : s.y[i]);
      pts += fmt(px) + "," + fmt(py) + " ";
      if (s.markers)
        marks += "<circle cx=\"" + fmt(px) + "\" cy=\"" + fmt(py) + "\" r=\"3\" fill=\"" + palette(s.color) + "\"/>";
    }
    if (!pts.empty())
      out += "<polyline class=\"series\" fill=\"none\" stroke=\"" + std::string(palette(s.color)) +
             "\" stroke-width=\"1.6\"" + (s.dashed ? " stroke-dasharray=\"5 3\"" : "") + " points=\"" + pts + "\"/>";
    out += marks;
    items.push_back({s.label, {s.color, s.dashed}});
  }
  out += legend(items, kH - 18, kW);
  return out + "</svg>";
}

std::string render(const BarChart& c) {
  double top = 0;
  for (const auto& g : c.groups)
    for (double v : g.values) top = std::max(top, v);
  if (c.groups.empty() || top <= 0) return open_svg(c.title) + text(kW / 2, kH / 2, "no data recorded") + "</svg>";
  const double pw = kW - kLeft - kRight;
  const double gw = pw / double(c.groups.size());
  // Category labels that would run into each other are turned 35 degrees
  // (anchored at their end), and the chart grows to hold them.
  double widest = 0;
  for (const auto& g : c.groups) widest = std::max(widest, text_width(g.label, 10));
  const bool turned = widest > gw - 6;
  const double extra = turned ? std::max(0.0, widest * std::sin(35 * std::numbers::pi / 180) - 8) : 0;
  const double h = kH + extra, ph = kH - kTop - kBottom;
  std::string out = open_svg(c.title, kW, h);
  std::vector<std::pair<double, std::string>> yt;
  if (c.bytes) {
    yt = byte_ticks(top);
  } else {
    const std::vector<double> t = ticks(0, top, 5);
    const std::vector<std::string> l = tick_labels(t);
    for (size_t i = 0; i < t.size(); ++i) yt.push_back({t[i], l[i]});
  }
  auto Y = [&](double v) { return kTop + (1 - v / top) * ph; };
  for (const auto& [v, label] : yt)
    out += "<line x1=\"" + fmt(kLeft) + "\" y1=\"" + fmt(Y(v)) + "\" x2=\"" + fmt(kLeft + pw) + "\" y2=\"" + fmt(Y(v)) +
           "\" stroke=\"#eee\"/>" + text(kLeft - 4, Y(v) + 4, label, "end", 10);
  const size_t n = std::max<size_t>(1, c.bar_labels.size());
  const double bw = std::min(28.0, 0.8 * gw / double(n));
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const double gx = kLeft + gw * double(g) + (gw - bw * double(n)) / 2;
    for (size_t b = 0; b < c.groups[g].values.size(); ++b) {
      const double v = c.groups[g].values[b];
      out += "<rect class=\"bar\" x=\"" + fmt(gx + bw * double(b)) + "\" y=\"" + fmt(Y(v)) + "\" width=\"" +
             fmt(bw - 1) + "\" height=\"" + fmt(kTop + ph - Y(v)) + "\" fill=\"" + palette(int(b)) + "\"><title>" +
             xml_escape(c.groups[g].label + " " + (b < c.bar_labels.size() ? c.bar_labels[b] : "") + ": " +
                        (c.bytes ? format_bytes(int64_t(v)) : short_number(v))) +
             "</title></rect>";
    }
    const double lx = kLeft + gw * (double(g) + 0.5), ly = kTop + ph + 14;
    out += turned ? text(lx + 3, ly - 2, c.groups[g].label, "end", 10,
                         " transform=\"rotate(-35 " + fmt(lx + 3) + " " + fmt(ly - 2) + ")\"")
                  : text(lx, ly, c.groups[g].label, "middle", 10);
  }
  out += "<line x1=\"" + fmt(kLeft) + "\" y1=\"" + fmt(kTop + ph) + "\" x2=\"" + fmt(kLeft + pw) + "\" y2=\"" +
         fmt(kTop + ph) + "\" stroke=\"#444\"/>";
  out += text(14, kTop + ph / 2, c.y_label, "middle", 11, " transform=\"rotate(-90 14 " + fmt(kTop + ph / 2) + ")\"");
  std::vector<std::pair<std::string, std::pair<int, bool>>> items;
  for (size_t b = 0; b < c.bar_labels.size(); ++b) items.push_back({c.bar_labels[b], {int(b), false}});
  out += legend(items, h - 18, kW);
  return out + "</svg>";
}

std::string render(const Timeline& t) {
  std::string out = open_svg(t.title);
  double end = 0;
  for (const auto& s : t.spans) end = std::max(end, s.end);
  if (t.spans.empty() || t.lanes <= 0 || end <= 0) return out + text(kW / 2, kH / 2, "no data recorded") + "</svg>";
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom, lh = ph / double(t.lanes);
  auto X = [&](double x) { return kLeft + x / end * pw; };
  for (int l = 0; l < t.lanes; ++l)
    out += text(kLeft - 4, kTop + lh * (l + 0.5) + 4, t.lane_prefix + std::to_string(l), "end", 10);
  for (const auto& s : t.spans) {
    const double x = X(s.start), w = std::max(1.0, X(s.end) - X(s.start)), y = kTop + lh * s.lane + 2;
    out += "<rect class=\"span\" x=\"" + fmt(x) + "\" y=\"" + fmt(y) + "\" width=\"" + fmt(w) + "\" height=\"" +
           fmt(lh - 4) + "\" fill=\"" + palette(s.color) + "\" stroke=\"#fff\"><title>" + xml_escape(s.label) +
           "</title></rect>";
    if (w > 16) out += text(x + w / 2, y + (lh - 4) / 2 + 4, s.label, "middle", 9, " fill=\"#fff\"");
  }
  const std::vector<double> xt = ticks(0, end, 6);
  const std::vector<std::string> xl = tick_labels(xt);
  for (size_t i = 0; i < xt.size(); ++i) out += text(X(xt[i]), kTop + ph + 14, xl[i]);
  out += text(kLeft + pw / 2, kTop + ph + 28, t.x_label);
  // The legend: a swatch of each span color and what it means.
  double x = kLeft;
  const double y = kH - 18;
  for (const auto& [label, color] : t.legend) {
    out += "<rect class=\"swatch\" x=\"" + fmt(x) + "\" y=\"" + fmt(y - 9) + "\" width=\"14\" height=\"10\" fill=\"" +
           palette(color) + "\"/>" + text(x + 18, y, label, "start", 10);
    x += 18 + text_width(label, 10) + 16;
  }
  return out + "</svg>";
}

}  // namespace meshtrain::report
