#include "meshtrain/train/scaling.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "meshtrain/comm/launch.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/plan/byte_size.h"
#include "meshtrain/plan/formulas.h"
#include "meshtrain/plan/prediction.h"
#include "meshtrain/train/meta_step.h"
#include "meshtrain/train/plan_inputs.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The config as `layout` runs it in the series, each rank on `threads` compute threads.
TrainConfig layout_config(const TrainConfig& cfg, const Layout& layout, int steps, bool weak, int64_t rows,
                          int threads) {
  TrainConfig c = with_layout(cfg, layout);
  c.comm.backend = "threads";
  c.training.steps = steps + 1;
  c.training.eval_every = 0;
  c.metrics.jsonl = "";
  c.checkpoint.every = 0;
  c.training.threads = threads;
  if (!weak) {
    const plan::WindowSplit w = plan::split_window(rows, layout.dp, cfg.training.micro_batch);
    c.training.micro_batch = w.micro_batch;
    c.training.grad_accum = w.grad_accum;
  }
  return c;
}

void run_point(ScalePoint& p, const TrainConfig& c, const Layout& layout, int steps, const data::TokenDataset& data) {
  struct RankRecord {
    std::vector<double> seconds, tokens_per_s, exposed;
    int64_t peak = 0, updates = 0;
    double loss = 0;
  };
  std::vector<RankRecord> ranks(size_t(layout.mesh().world_size()));
  comm::LaunchOptions o;
  o.mesh = layout.mesh();
  o.world_size = o.mesh.world_size();
  o.group.timeout = comm::Millis(int64_t(c.comm.timeout_s * 1000));
  std::mutex mu;
  comm::launch_threads(o, [&](comm::ParallelContext& ctx) {
    set_compute_threads(c.training.threads);
    Trainer t(c, ctx, data, std::nullopt);
    RankRecord r;
    for (int s = 0; s <= steps; ++s) {
      const StepMetrics m = t.step();
      if (!m.skipped) ++r.updates;
      r.loss = m.loss;
      r.peak = std::max(r.peak, m.memory.total_peak);
      if (s == 0) continue;  // the warm-up step fills the caching allocator
      r.seconds.push_back(m.seconds);
      r.tokens_per_s.push_back(m.tokens_per_s);
      r.exposed.push_back(m.comm_exposed_s);
    }
    std::lock_guard<std::mutex> lock(mu);
    ranks[size_t(ctx.rank)] = std::move(r);
  });
  p.ran = true;
  // The median step (by time) gives both figures, so tokens/s and the step
  // time describe the same step.
  const RankRecord& r0 = ranks[0];
  std::vector<size_t> order(r0.seconds.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r0.seconds[a] < r0.seconds[b]; });
  if (!order.empty()) {
    p.step_s = r0.seconds[order[order.size() / 2]];
    p.tokens_per_s = r0.tokens_per_s[order[order.size() / 2]];
  }
  std::vector<double> exposed(ranks[0].exposed.size(), 0.0);
  for (const RankRecord& r : ranks) {
    p.peak_bytes = std::max(p.peak_bytes, r.peak);
    for (size_t i = 0; i < exposed.size() && i < r.exposed.size(); ++i) exposed[i] = std::max(exposed[i], r.exposed[i]);
  }
  p.exposed_s = median(exposed);
  p.updates = ranks[0].updates;
  p.loss = ranks[0].loss;
}

}  // namespace

ScaleReport run_scaling(const TrainConfig& cfg, const std::vector<Layout>& layouts, int steps, bool weak,
                        const data::TokenDataset& train_data, const plan::HardwareProfile* hw, int threads_per_rank) {
  MT_REQUIRE(ConfigError, steps >= 1, "--steps ", steps, ": needs at least one measured step");
  MT_REQUIRE(ConfigError, !layouts.empty(), "--layouts: give at least one layout (dp=1 dp=2 ...)");
  MT_REQUIRE(ConfigError, threads_per_rank >= 0, "--threads-per-rank ", threads_per_rank, ": expected >= 0");
  ScaleReport rep;
  rep.weak = weak;
  rep.steps = steps;
  rep.threads_per_rank = threads_per_rank;
  rep.cores = hardware_cores();
  rep.threads = rep.cores;
  const int64_t rows = int64_t(std::max(cfg.parallel.dp, 1)) * cfg.training.micro_batch * cfg.training.grad_accum;
  for (const Layout& layout : layouts) {
    ScalePoint p;
    p.layout = layout.str();
    p.devices = layout.mesh().world_size();
    // Same threads: T split over the ranks (at least one each; a layout of
    // more ranks than T uses more, and the table shows it).
    p.threads_per_rank = threads_per_rank > 0 ? threads_per_rank : std::max(1, rep.threads / p.devices);
    try {
      const TrainConfig c = layout_config(cfg, layout, steps, weak, rows, p.threads_per_rank);
      p.micro_batch = c.training.micro_batch;
      p.grad_accum = c.training.grad_accum;
      p.rows = int64_t(layout.dp) * p.micro_batch * p.grad_accum;
      if (hw) p.predicted_step_s = plan::predict(step_inputs(c, layout), meta_step_recorder(), hw, false).time->step_s;
      run_point(p, c, layout, steps, train_data);
    } catch (const std::exception& e) {
      p.ran = false;
      p.error = e.what();
    }
    rep.points.push_back(std::move(p));
  }
  // The smallest runnable layout is the baseline (docs/math.md,
  // "Scaling efficiency": never an invented single-device time).
  for (size_t i = 0; i < rep.points.size(); ++i)
    if (rep.points[i].ran && (rep.baseline < 0 || rep.points[i].devices < rep.points[size_t(rep.baseline)].devices))
      rep.baseline = int(i);
  if (rep.baseline >= 0) {
    const ScalePoint& b = rep.points[size_t(rep.baseline)];
    for (ScalePoint& p : rep.points) {
      if (!p.ran) continue;
      if (threads_per_rank == 0) {
        // The same cores: throughput over the baseline's, ideally 1.
        p.speedup = p.efficiency = p.tokens_per_s / b.tokens_per_s;
      } else if (weak) {
        p.speedup = (p.tokens_per_s / b.tokens_per_s);
        p.efficiency = b.step_s / p.step_s;  // same work per device
      } else {
        const plan::Scaling s = plan::scaling_efficiency(b.step_s, b.devices, p.step_s, p.devices);
        p.speedup = s.speedup;
        p.efficiency = s.efficiency;
      }
    }
  }
  return rep;
}

double ScaleReport::ideal_tokens_per_s(const ScalePoint& p) const {
  if (baseline < 0) return 0;
  const ScalePoint& b = points[size_t(baseline)];
  return threads_per_rank == 0 ? b.tokens_per_s : b.tokens_per_s * p.devices / b.devices;
}

std::string ScaleReport::table() const {
  std::ostringstream os;
  os << (weak ? "weak" : "strong") << " scaling, threads backend, " << steps << " measured steps per layout after one "
     << "warm-up (the median step)";
  if (baseline >= 0)
    os << "; baseline: " << points[size_t(baseline)].layout << " (" << points[size_t(baseline)].devices << " rank"
       << (points[size_t(baseline)].devices > 1 ? "s" : "") << ", the smallest runnable layout)";
  os << "\n";
  if (threads_per_rank == 0)
    os << "like with like: every layout computes on the same " << threads << " thread" << (threads > 1 ? "s" : "")
       << " (the cores this process may use, split over its ranks), so E = tokens/s over the baseline's (ideal 1)\n";
  else
    os << "like with like: a device is " << threads_per_rank << " thread" << (threads_per_rank > 1 ? "s" : "")
       << ", so a layout of D ranks computes on D x " << threads_per_rank << " threads (" << cores
       << " cores here)\n";
  size_t width = 6;
  for (const ScalePoint& p : points) width = std::max(width, p.layout.size());
  char line[1024];
  std::snprintf(line, sizeof line, "  %-*s %5s %7s %9s %10s %12s %8s %7s %11s %10s %7s %10s\n", int(width), "layout",
                "ranks", "threads", "B x G", "step", "tokens/s", "speedup", "E", "peak", "exposed", "updates",
                "predicted");
  os << line;
  bool over = false;
  for (const ScalePoint& p : points) {
    if (!p.ran) {
      os << "  " << p.layout << ": cannot run: " << p.error << "\n";
      continue;
    }
    char bg[32], threads_used[32], step[32], exposed[32], pred[32] = "-";
    std::snprintf(bg, sizeof bg, "%lldx%lld", (long long)p.micro_batch, (long long)p.grad_accum);
    const int used = p.devices * p.threads_per_rank;
    over = over || used > cores;
    std::snprintf(threads_used, sizeof threads_used, "%d%s", used, used > cores ? "*" : "");
    std::snprintf(step, sizeof step, "%.1f ms", p.step_s * 1e3);
    std::snprintf(exposed, sizeof exposed, "%.2f ms", p.exposed_s * 1e3);
    if (p.predicted_step_s) std::snprintf(pred, sizeof pred, "%.1f ms", *p.predicted_step_s * 1e3);
    std::snprintf(line, sizeof line, "  %-*s %5d %7s %9s %10s %12.0f %8.2f %6.1f%% %11s %10s %7lld %10s\n",
                  int(width), p.layout.c_str(), p.devices, threads_used, bg, step, p.tokens_per_s, p.speedup,
                  100 * p.efficiency, plan::gib(double(p.peak_bytes)).c_str(), exposed, (long long)p.updates, pred);
    os << line;
  }
  if (over) os << "  * more threads than the " << cores << " cores: the ranks share cores, not comparable\n";
  if (threads_per_rank > 0)
    os << "  E = (t_base / t) / (D / D_base) (docs/math.md (M.68))" << (weak ? "; weak scaling: E = t_base / t" : "");
  else
    os << "  speedup = E = tokens/s / tokens/s of the baseline, on the same threads";
  os << "; tokens/s counts supervised targets\n";
  return os.str();
}

nlohmann::json ScaleReport::json() const {
  nlohmann::json j;
  j["mode"] = weak ? "weak" : "strong";
  j["steps"] = steps;
  j["threads"] = threads_per_rank == 0 ? nlohmann::json({{"same_total", threads}})
                                       : nlohmann::json({{"per_rank", threads_per_rank}});
  j["cores"] = cores;
  j["baseline"] = baseline >= 0 ? nlohmann::json(points[size_t(baseline)].layout) : nlohmann::json();
  j["points"] = nlohmann::json::array();
  for (const ScalePoint& p : points) {
    nlohmann::json q = {{"layout", p.layout}, {"devices", p.devices}, {"threads_per_rank", p.threads_per_rank},
                        {"ran", p.ran}};
    if (!p.ran) q["error"] = p.error;
    else
      q.update({{"rows", p.rows}, {"micro_batch", p.micro_batch}, {"grad_accum", p.grad_accum},
                {"step_s", p.step_s}, {"tokens_per_s", p.tokens_per_s}, {"speedup", p.speedup},
                {"efficiency", p.efficiency}, {"peak_bytes", p.peak_bytes}, {"exposed_s", p.exposed_s},
                {"updates", p.updates}, {"loss", p.loss}});
    if (p.predicted_step_s) q["predicted_step_s"] = *p.predicted_step_s;
    j["points"].push_back(q);
  }
  return j;
}

}  // namespace meshtrain::train
