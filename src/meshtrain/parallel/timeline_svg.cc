#include "meshtrain/parallel/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace meshtrain::parallel {

namespace {

constexpr double kLeft = 70, kRight = 20, kTop = 40, kLane = 30, kGap = 6, kWidth = 960;

const char* fill_of(Op op) {
  switch (op) {
    case Op::Forward:
      return "#4e79a7";
    case Op::BackwardInput:
      return "#59a14f";
    case Op::BackwardWeight:
      return "#f28e2b";
    default:
      return "#76b7b2";  // fused BW
  }
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A round tick step giving about `n` ticks over `span`.
double tick_step(double span, int n) {
  const double raw = span / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (raw <= f * mag) return f * mag;
  return 10 * mag;
}

}  // namespace

std::string timeline_svg(const PipelineTimeline& t, const std::string& title) {
  double end = 0;
  bool several_chunks = t.virtual_stages > 1;
  for (const auto& stage : t.stages)
    for (const TimedAction& a : stage) end = std::max(end, a.end);
  const double ms = std::max(end * 1e3, 1e-6);
  const int lanes = int(t.stages.size());
  const double plot_w = kWidth - kLeft - kRight, height = kTop + lanes * (kLane + kGap) + 70;
  auto x_of = [&](double seconds) { return kLeft + plot_w * (seconds * 1e3 / ms); };
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                "font-family=\"sans-serif\" font-size=\"11\">\n",
                kWidth, height, kWidth, height);
  s += buf;
  s += "<title>" + escape(title) + "</title>\n";
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">%s</text>\n", kLeft,
                escape(title).c_str());
  s += buf;
  for (int r = 0; r < lanes; ++r) {
    const double y = kTop + r * (kLane + kGap);
    std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">stage %d</text>\n", kLeft - 8,
                  y + kLane / 2 + 4, r);
    s += buf;
    for (const TimedAction& a : t.stages[size_t(r)]) {
      const double x0 = x_of(a.start), w = std::max(0.5, x_of(a.end) - x0);
      std::string label = std::string(to_string(a.op)) + std::to_string(a.micro);
      if (several_chunks) label.append(".").append(std::to_string(a.chunk));
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" stroke=\"#ffffff\" "
                    "stroke-width=\"0.5\"><title>%s chunk %d: %.3f-%.3f ms</title></rect>\n",
                    x0, y, w, kLane, fill_of(a.op), label.c_str(), a.chunk, a.start * 1e3, a.end * 1e3);
      s += buf;
      // A label only where it fits (about 6 px per character).
      if (w > 6.5 * double(label.size())) {
        std::snprintf(buf, sizeof buf,
                      "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#ffffff\">%s</text>\n", x0 + w / 2,
                      y + kLane / 2 + 4, label.c_str());
        s += buf;
      }
    }
  }
  // Time axis.
  const double axis_y = kTop + lanes * (kLane + kGap) + 4, step = tick_step(ms, 8);
  std::snprintf(buf, sizeof buf, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#333333\"/>\n", kLeft,
                axis_y, kLeft + plot_w, axis_y);
  s += buf;
  for (double v = 0; v <= ms * (1 + 1e-9); v += step) {
    const double x = kLeft + plot_w * v / ms;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333333\"/>"
                  "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                  x, axis_y, x, axis_y + 4, x, axis_y + 16, v);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"middle\">milliseconds</text>\n",
                kLeft + plot_w / 2, axis_y + 32);
  s += buf;
  // Legend.
  double lx = kLeft;
  const double ly = axis_y + 44;
  for (Op op : {Op::Forward, Op::Backward, Op::BackwardInput, Op::BackwardWeight}) {
    const char* name = op == Op::Forward         ? "F forward"
                       : op == Op::Backward      ? "BW backward"
                       : op == Op::BackwardInput ? "B input gradient"
                                                 : "W weight gradient";
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                  "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                  lx, ly, fill_of(op), lx + 16, ly + 10, name);
    s += buf;
    lx += 150;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.0f\">measured bubble %.3f</text>\n", lx, ly + 10,
                t.measured_bubble());
  s += buf;
  s += "</svg>\n";
  return s;
}

}  // namespace meshtrain::parallel
