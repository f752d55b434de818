#include "meshtrain/train/scaling_chart.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace meshtrain::train {

namespace {

std::string num(double v, const char* f = "%.1f") {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

}  // namespace

std::string scaling_svg(const ScaleReport& r) {
  std::vector<const ScalePoint*> pts;
  for (const ScalePoint& p : r.points)
    if (p.ran) pts.push_back(&p);
  const double W = 720, H = 420, left = 80, right = 80, top = 50, bottom = 90;
  const double pw = W - left - right, ph = H - top - bottom;
  const ScalePoint* base = r.baseline >= 0 ? &r.points[size_t(r.baseline)] : nullptr;
  double ymax = 1;
  for (const ScalePoint* p : pts) {
    ymax = std::max(ymax, p->tokens_per_s);
    if (base) ymax = std::max(ymax, r.ideal_tokens_per_s(*p));
  }
  ymax *= 1.15;
  auto x_of = [&](size_t i) { return left + pw * (double(i) + 0.5) / double(std::max<size_t>(pts.size(), 1)); };
  auto y_of = [&](double v) { return top + ph * (1 - v / ymax); };
  auto y_eff = [&](double e) { return top + ph * (1 - std::min(e, 1.2) / 1.2); };

  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << (r.weak ? "Weak" : "Strong")
     << " scaling: supervised tokens/s and efficiency" << (r.threads_per_rank > 0 ? " (docs/math.md (M.68))" : "")
     << (base ? " vs the baseline " : "") << (base ? escape(base->layout.substr(0, base->layout.find(','))) : "")
     << "</text>\n";
  // Axes and grid.
  os << "<line x1=\"" << left << "\" y1=\"" << top + ph << "\" x2=\"" << left + pw << "\" y2=\"" << top + ph
     << "\" stroke=\"black\"/>\n";
  os << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + ph
     << "\" stroke=\"black\"/>\n";
  os << "<line x1=\"" << left + pw << "\" y1=\"" << top << "\" x2=\"" << left + pw << "\" y2=\"" << top + ph
     << "\" stroke=\"#c0504d\"/>\n";
  for (int k = 0; k <= 4; ++k) {
    const double v = ymax * k / 4, y = y_of(v);
    os << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + pw << "\" y2=\"" << y
       << "\" stroke=\"#e0e0e0\"/>\n";
    os << "<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << num(v, "%.0f") << "</text>\n";
    os << "<text x=\"" << left + pw + 6 << "\" y=\"" << y_eff(1.2 * k / 4) + 4 << "\" fill=\"#c0504d\">"
       << num(120.0 * k / 4, "%.0f") << "%</text>\n";
  }
  os << "<text x=\"20\" y=\"" << top + ph / 2 << "\" transform=\"rotate(-90 20 " << top + ph / 2
     << ")\" text-anchor=\"middle\">supervised tokens/s</text>\n";
  os << "<text x=\"" << W - 20 << "\" y=\"" << top + ph / 2 << "\" transform=\"rotate(90 " << W - 20 << " "
     << top + ph / 2 << ")\" text-anchor=\"middle\" fill=\"#c0504d\">efficiency E</text>\n";
  // Bars: measured tokens/s; dashed ticks: ideal from the baseline; dots: E.
  const double bw = pw / double(std::max<size_t>(pts.size(), 1)) * 0.45;
  std::string eff_path;
  for (size_t i = 0; i < pts.size(); ++i) {
    const ScalePoint& p = *pts[i];
    const double x = x_of(i);
    os << "<rect x=\"" << x - bw / 2 << "\" y=\"" << y_of(p.tokens_per_s) << "\" width=\"" << bw << "\" height=\""
       << top + ph - y_of(p.tokens_per_s) << "\" fill=\"#4f81bd\"/>\n";
    if (base) {
      const double ideal = r.ideal_tokens_per_s(p);
      os << "<line x1=\"" << x - bw / 2 - 4 << "\" y1=\"" << y_of(ideal) << "\" x2=\"" << x + bw / 2 + 4 << "\" y2=\""
         << y_of(ideal) << "\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n";
    }
    const double ye = y_eff(p.efficiency);
    eff_path += eff_path.empty() ? "M" : " L";
    eff_path += num(x);
    eff_path += ' ';
    eff_path += num(ye);
    os << "<circle cx=\"" << x << "\" cy=\"" << ye << "\" r=\"4\" fill=\"#c0504d\"/>\n";
    os << "<text x=\"" << x << "\" y=\"" << ye - 8 << "\" text-anchor=\"middle\" fill=\"#c0504d\">"
       << num(100 * p.efficiency, "%.0f") << "%</text>\n";
    os << "<text x=\"" << x << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">D=" << p.devices << ", "
       << p.devices * p.threads_per_rank << " threads</text>\n";
    os << "<text x=\"" << x << "\" y=\"" << top + ph + 31 << "\" text-anchor=\"middle\" font-size=\"10\">"
       << escape(p.layout.substr(0, p.layout.find(",reshard"))) << "</text>\n";
  }
  if (!eff_path.empty()) os << "<path d=\"" << eff_path << "\" fill=\"none\" stroke=\"#c0504d\"/>\n";
  os << "<text x=\"" << left << "\" y=\"" << H - 20 << "\" font-size=\"11\">bars: measured tokens/s; dashed: ideal "
     << (r.threads_per_rank > 0 ? "(baseline x D / D_base)" : "(the baseline's: every layout on the same threads)")
     << "; red: efficiency E</text>\n";
  os << "</svg>\n";
  return os.str();
}

}  // namespace meshtrain::train
