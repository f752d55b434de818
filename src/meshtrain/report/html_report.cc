#include "meshtrain/report/html_report.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "meshtrain/core/memory_tracker.h"
#include "meshtrain/report/membership_section.h"
#include "meshtrain/report/rank_section.h"
#include "meshtrain/report/svg_plot.h"

namespace meshtrain::report {
namespace {

using Getter = double (*)(const StepRecord&, const RunLog&);

// One series per run of a per-step quantity (skipped steps left out).
LinePlot per_step(const std::vector<RunLog>& runs, const std::string& title, const std::string& y_label, Getter get,
                  bool log_y = false) {
  LinePlot p{title, "step", y_label, {}, log_y};
  for (size_t i = 0; i < runs.size(); ++i) {
    Series s{runs[i].name, {}, {}, int(i)};
    for (const auto& st : runs[i].steps) {
      if (st.skipped) continue;
      s.x.push_back(double(st.step));
      s.y.push_back(get(st, runs[i]));
    }
    p.series.push_back(std::move(s));
  }
  return p;
}

std::string num(double v, const char* f = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string layout_table(const std::vector<RunLog>& runs) {
  std::string out = "<table><tr><th>run</th><th>model</th><th>parameters</th><th>layout</th><th>batch</th>"
                    "<th>precision</th><th>MFU peak</th><th>steps</th></tr>";
  for (const auto& r : runs) {
    const auto& j = r.run;
    const auto l = j.value("layout", nlohmann::json::object());
    const auto p = j.value("precision", nlohmann::json::object());
    std::string layout = l.empty() ? "not recorded"
                                   : l.value("backend", "?") + ", pp=" + std::to_string(l.value("pp", 1)) +
                                         " dp=" + std::to_string(l.value("dp", 0)) + " cp=" +
                                         std::to_string(l.value("cp", 1)) + " tp=" + std::to_string(l.value("tp", 1)) +
                                         ", zero_stage=" + std::to_string(l.value("zero_stage", 0)) + ", " +
                                         l.value("grad_reduce", "?") + ", " +
                                         std::to_string(l.value("threads_per_rank", 0)) + " threads/rank";
    std::string batch = l.empty() ? "" : "micro-batch " + std::to_string(l.value("micro_batch", 0)) + " x G=" +
                                             std::to_string(l.value("grad_accum", 0)) + ", seq " +
                                             std::to_string(l.value("seq_len", 0)) + " " + l.value("mode", "");
    std::string prec;
    for (const auto& [k, v] : p.items()) prec += (prec.empty() ? "" : ", ") + k + " " + v.get<std::string>();
    out += "<tr>" + table_cell(r.name) + table_cell(j.value("model", "not recorded")) +
           table_cell(j.contains("parameters") ? short_number(j["parameters"].get<double>()) : "") + table_cell(layout) +
           table_cell(batch) + table_cell(prec.empty() ? "not recorded" : prec) +
           table_cell(r.peak_gflops() > 0 ? num(r.peak_gflops(), "%.1f GFLOP/s") +
                                          (r.peak_from_steps ? " (the fastest step, above the recorded peak)" : "")
                                    : "not recorded") +
           table_cell(std::to_string(r.steps.back().step) + (j.contains("total_steps")
                                                           ? " of " + std::to_string(j["total_steps"].get<int64_t>())
                                                           : "")) +
           "</tr>";
  }
  return out + "</table>";
}

std::string summary_table(const std::vector<RunLog>& runs) {
  std::string out = "<table><tr><th>run</th><th>final loss</th><th>validation loss</th><th>validation bits/byte</th>"
                    "<th>median tokens/s</th><th>median MFU</th><th>skipped steps</th></tr>";
  for (const auto& r : runs) {
    std::vector<double> tps, mfu;
    int64_t skipped = 0;
    for (const auto& s : r.steps) {
      if (s.skipped) {
        ++skipped;
        continue;
      }
      tps.push_back(s.tokens_per_s);
      if (r.peak_gflops() > 0) mfu.push_back(100 * s.gflops / r.peak_gflops());
    }
    auto median = [](std::vector<double> v) {
      if (v.empty()) return -1.0;
      std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    const double m_tps = median(tps), m_mfu = median(mfu);
    const EvalRecord* e = r.evals.empty() ? nullptr : &r.evals.back();
    out += "<tr>" + table_cell(r.name) + table_cell(num(r.steps.back().loss)) + table_cell(e ? num(e->val_loss) : "none") +
           table_cell(e && e->bits_per_byte >= 0 ? num(e->bits_per_byte) : "none") +
           table_cell(m_tps >= 0 ? short_number(m_tps) : "") + table_cell(m_mfu >= 0 ? num(m_mfu, "%.1f%%") : "unknown") +
           table_cell(std::to_string(skipped)) + "</tr>";
  }
  return out + "</table>";
}

std::string skipped_table(const std::vector<RunLog>& runs) {
  std::string rows;
  for (const auto& r : runs)
    for (const auto& s : r.steps)
      if (s.skipped) rows += "<tr>" + table_cell(r.name) + table_cell(std::to_string(s.step)) + table_cell(s.skip_reason) + "</tr>";
  if (rows.empty()) return "<p class=\"note\">No step was skipped.</p>";
  return "<table><tr><th>run</th><th>step</th><th>reason</th></tr>" + rows + "</table>";
}

BarChart memory_chart(const std::vector<RunLog>& runs) {
  BarChart c{"Peak memory by category (max over steps, rank 0)", "bytes", {}, {}, true};
  std::vector<std::string> cats;
  for (const auto& r : runs)
    for (const auto& s : r.steps)
      for (const auto& [k, v] : s.peak_memory)
        if (std::find(cats.begin(), cats.end(), k) == cats.end()) cats.push_back(k);
  for (const auto& r : runs) c.bar_labels.push_back(r.name);
  for (const auto& k : cats) {
    BarGroup g{k, {}};
    for (const auto& r : runs) {
      double peak = 0;
      for (const auto& s : r.steps) {
        const auto it = s.peak_memory.find(k);
        if (it != s.peak_memory.end()) peak = std::max(peak, it->second);
      }
      g.values.push_back(peak);
    }
    c.groups.push_back(std::move(g));
  }
  return c;
}

std::string pipeline_section(const std::vector<RunLog>& runs) {
  std::string out;
  for (const auto& r : runs) {
    if (r.pipeline.empty()) continue;
    Timeline t{"Pipeline timeline of " + r.name + ", step " + std::to_string(r.pipeline_step), "stage ", "seconds",
               0, {}, {}};
    // One color per kind of work, named in the legend (docs/pipeline.md).
    static const std::pair<const char*, const char*> kinds[] = {
        {"F", "F forward"}, {"B", "B backward"}, {"W", "W weight gradient"}, {"BW", "BW backward + weight gradient"}};
    std::set<int> seen;
    for (const auto& op : r.pipeline) {
      t.lanes = std::max(t.lanes, op.stage + 1);
      int color = 4;  // a kind this report does not know
      for (int k = 0; k < 4; ++k)
        if (op.kind == kinds[k].first) color = k;
      seen.insert(color);
      t.spans.push_back({op.stage, op.start_s, op.end_s, op.kind + std::to_string(op.micro), color});
    }
    for (int k : seen) t.legend.push_back({k < 4 ? kinds[k].second : "other", k});
    out += "<figure>" + render(t) + "</figure>";
  }
  return out.empty() ? "<p class=\"note\">No pipeline schedule was recorded in these runs.</p>" : out;
}

}  // namespace

std::string render_report(const std::vector<RunLog>& runs) {
  std::string names;
  for (const auto& r : runs) names += (names.empty() ? "" : ", ") + r.name;

  LinePlot loss{"Loss against supervised tokens", "supervised tokens", "loss (nats/token)", {}};
  LinePlot bpb{"Validation bits per byte", "supervised tokens", "bits/byte", {}};
  for (size_t i = 0; i < runs.size(); ++i) {
    Series train{runs[i].name + " train", {}, {}, int(i)}, val{runs[i].name + " validation", {}, {}, int(i), true, true};
    Series vb{runs[i].name, {}, {}, int(i), false, true};
    for (const auto& s : runs[i].steps)
      if (!s.skipped) train.x.push_back(s.tokens), train.y.push_back(s.loss);
    for (const auto& e : runs[i].evals) {
      val.x.push_back(e.tokens), val.y.push_back(e.val_loss);
      if (e.bits_per_byte >= 0) vb.x.push_back(e.tokens), vb.y.push_back(e.bits_per_byte);
    }
    loss.series.push_back(std::move(train));
    if (!val.x.empty()) loss.series.push_back(std::move(val));
    if (!vb.x.empty()) bpb.series.push_back(std::move(vb));
  }
  const LinePlot tps = per_step(runs, "Throughput", "supervised tokens/s",
                                [](const StepRecord& s, const RunLog&) { return s.tokens_per_s; });
  const LinePlot mfu = per_step(runs, "Model FLOPs utilization (of the cores' measured peak)", "MFU (%)",
                                [](const StepRecord& s, const RunLog& r) {
                                  return r.peak_gflops() > 0 ? 100 * s.gflops / r.peak_gflops() : -1.0;
                                });
  const LinePlot gnorm = per_step(runs, "Gradient norm (before clipping)", "global norm",
                                  [](const StepRecord& s, const RunLog&) { return s.grad_norm; }, true);
  const LinePlot lr = per_step(runs, "Learning rate", "lr", [](const StepRecord& s, const RunLog&) { return s.lr; });
  LinePlot comm{"Communication time per step (solid: total, dashed: exposed)", "step", "seconds", {}};
  for (size_t i = 0; i < runs.size(); ++i) {
    Series total{runs[i].name + " total", {}, {}, int(i)}, exposed{runs[i].name + " exposed", {}, {}, int(i), true};
    for (const auto& s : runs[i].steps) {
      total.x.push_back(double(s.step)), total.y.push_back(s.comm_s);
      exposed.x.push_back(double(s.step)), exposed.y.push_back(s.comm_exposed_s);
    }
    comm.series.push_back(std::move(total));
    comm.series.push_back(std::move(exposed));
  }
  LinePlot share = per_step(runs, "Exposed share of communication (not hidden behind compute)", "exposed (%)",
                            [](const StepRecord& s, const RunLog&) {
                              // Exposed <= total by construction (parallel/sync_stats.h); files written
                              // before that held waits above the total: those read as fully exposed.
                              return s.comm_s > 0 ? 100 * std::min(s.comm_exposed_s, s.comm_s) / s.comm_s : -1.0;
                            });
  share.percent = true;
  for (auto* p : {&share})
    for (auto& s : p->series)
      for (size_t k = 0; k < s.y.size(); ++k)
        if (s.y[k] < 0) s.y[k] = std::nan("");  // no communication: no point
  LinePlot mfu_shown = mfu;
  mfu_shown.percent = true;
  for (auto& s : mfu_shown.series)
    for (auto& y : s.y)
      if (y < 0) y = std::nan("");

  std::string h;
  h += "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/>";
  h += "<title>meshtrain report: " + xml_escape(names) + "</title>";
  h += "<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1180px}"
       "h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}"
       "table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:left}th{background:#f4f4f4}figure{display:inline-block;margin:6px}.note{color:#666}"
       "</style></head><body>";
  h += "<h1>meshtrain report</h1><p>Runs: " + xml_escape(names) + "</p>";
  h += "<h2>Summary</h2>" + summary_table(runs);
  h += "<h2>Layout and precision</h2>" + layout_table(runs);
  h += "<h2>Loss</h2><figure>" + render(loss) + "</figure>";
  if (!bpb.series.empty()) h += "<figure>" + render(bpb) + "</figure>";
  h += "<h2>Speed</h2><figure>" + render(tps) + "</figure><figure>" + render(mfu_shown) + "</figure>";
  h += "<h2>Optimization</h2><figure>" + render(gnorm) + "</figure><figure>" + render(lr) + "</figure>";
  h += "<h2>Memory</h2><figure>" + render(memory_chart(runs)) + "</figure>";
  h += "<h2>Communication</h2><figure>" + render(comm) + "</figure><figure>" + render(share) + "</figure>";
  h += "<h2>Ranks</h2>" + ranks_section(runs);
  h += "<h2>Restarts and membership</h2>" + membership_section(runs);
  h += "<h2>Skipped steps</h2>" + skipped_table(runs);
  h += "<h2>Pipeline</h2>" + pipeline_section(runs);
  h += "<p class=\"note\">MFU is the model's FLOPs per second over the peak of the cores the run computed on: the "
       "best GEMM rate of one core in the run's compute dtype (measured once per CPU and cached; the same per-core "
       "peak as <code>meshtrain plan</code>'s machine profiles) times the cores, raised to any rate a step reached, "
       "so it never exceeds 100%. The exposed share is the part of the communication's time in flight that a rank "
       "waited for. A rank's compute time is its step time outside collective calls: a slow rank shows as more "
       "compute, its peers as more time in collectives waiting for it.</p>";
  h += "</body></html>\n";
  return h;
}

}  // namespace meshtrain::report
