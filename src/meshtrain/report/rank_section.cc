#include "meshtrain/report/rank_section.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "meshtrain/report/svg_plot.h"

namespace meshtrain::report {
namespace {

// Past this many ranks the table lists the slowest kShownRanks only.
constexpr size_t kAllRanksUpTo = 32, kShownRanks = 16;

std::string fixed(double v, const char* f = "%.4f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// As the run computed it (train/rank_timing.h): the lower middle value.
double median(std::vector<double> v) {
  const size_t mid = (v.size() - 1) / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  return v[mid];
}

struct RankSums {
  double step = 0, compute = 0;
  int64_t steps = 0, slowest = 0, named = 0;
};

std::string rank_table(const RunLog& r) {
  std::vector<RankSums> sums;
  for (const auto& s : r.steps) {
    if (s.rank_compute_s.empty()) continue;
    if (sums.size() < s.rank_compute_s.size()) sums.resize(s.rank_compute_s.size());
    const size_t slowest = size_t(std::max_element(s.rank_compute_s.begin(), s.rank_compute_s.end()) -
                                  s.rank_compute_s.begin());
    for (size_t k = 0; k < s.rank_compute_s.size(); ++k) {
      sums[k].step += s.rank_step_s[k];
      sums[k].compute += s.rank_compute_s[k];
      ++sums[k].steps;
    }
    ++sums[slowest].slowest;
    for (const auto& m : s.stragglers)
      if (m.rank >= 0 && size_t(m.rank) < sums.size()) ++sums[size_t(m.rank)].named;
  }
  if (sums.empty()) return "";
  std::vector<size_t> order(sums.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::string note;
  if (sums.size() > kAllRanksUpTo) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return sums[a].compute / double(std::max<int64_t>(1, sums[a].steps)) >
             sums[b].compute / double(std::max<int64_t>(1, sums[b].steps));
    });
    order.resize(kShownRanks);
    note = "<p class=\"note\">" + xml_escape(r.name) + ": the " + std::to_string(kShownRanks) + " ranks with the most " +
           "compute of " + std::to_string(sums.size()) + ".</p>";
  }
  std::string out = "<table><tr><th>run</th><th>rank</th><th>mean step (s)</th><th>mean compute (s)</th>"
                    "<th>mean in collectives (s)</th><th>slowest in</th><th>named straggler in</th></tr>";
  for (size_t k : order) {
    const RankSums& s = sums[k];
    const double n = double(std::max<int64_t>(1, s.steps));
    out += "<tr>" + table_cell(r.name) + table_cell(std::to_string(k)) + table_cell(fixed(s.step / n)) + table_cell(fixed(s.compute / n)) +
           table_cell(fixed(std::max(0.0, s.step - s.compute) / n)) +
           table_cell(std::to_string(s.slowest) + " of " + std::to_string(s.steps) + " steps") +
           table_cell(std::to_string(s.named) + " of " + std::to_string(s.steps) + " steps") + "</tr>";
  }
  return out + "</table>" + note;
}

struct Named {
  std::string host;
  int64_t first = 0, last = 0, steps = 0;
  double ratio = 0;
};

std::string straggler_table(const std::vector<RunLog>& runs) {
  std::string rows;
  for (const auto& r : runs) {
    std::map<int, Named> by_rank;
    for (const auto& s : r.steps)
      for (const auto& m : s.stragglers) {
        Named& n = by_rank[m.rank];
        if (n.steps++ == 0) n.first = s.step, n.host = m.host;
        n.last = s.step;
        n.ratio = std::max(n.ratio, m.ratio);
      }
    for (const auto& [rank, n] : by_rank)
      rows += "<tr>" + table_cell(r.name) + table_cell(std::to_string(rank)) + table_cell(n.host) +
              table_cell(std::to_string(n.first) + " to " + std::to_string(n.last)) + table_cell(std::to_string(n.steps)) +
              table_cell(fixed(n.ratio, "%.2fx")) + "</tr>";
  }
  if (rows.empty()) return "<p class=\"note\">No rank was named a straggler.</p>";
  return "<table><tr><th>run</th><th>rank</th><th>host</th><th>steps</th><th>steps named</th>"
         "<th>highest compute / median</th></tr>" + rows + "</table>";
}

}  // namespace

std::string ranks_section(const std::vector<RunLog>& runs) {
  LinePlot p{"Compute time per step across ranks (solid: median rank, dashed: slowest and fastest)", "step",
             "seconds", {}};
  std::string tables;
  for (size_t i = 0; i < runs.size(); ++i) {
    Series mid{runs[i].name + " median", {}, {}, int(i)}, hi{runs[i].name + " slowest", {}, {}, int(i), true},
        lo{runs[i].name + " fastest", {}, {}, int(i), true};
    for (const auto& s : runs[i].steps) {
      if (s.rank_compute_s.empty()) continue;
      const double x = double(s.step);
      mid.x.push_back(x), mid.y.push_back(median(s.rank_compute_s));
      hi.x.push_back(x), hi.y.push_back(*std::max_element(s.rank_compute_s.begin(), s.rank_compute_s.end()));
      lo.x.push_back(x), lo.y.push_back(*std::min_element(s.rank_compute_s.begin(), s.rank_compute_s.end()));
    }
    if (mid.x.empty()) continue;
    p.series.push_back(std::move(mid));
    p.series.push_back(std::move(hi));
    p.series.push_back(std::move(lo));
    tables += rank_table(runs[i]);
  }
  if (p.series.empty()) return "<p class=\"note\">No per-rank step times were recorded in these runs.</p>";
  return "<figure>" + render(p) + "</figure>" + tables + straggler_table(runs);
}

}  // namespace meshtrain::report
