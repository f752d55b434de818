#include "meshtrain/plan/plan_report.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "meshtrain/plan/byte_size.h"
#include "meshtrain/plan/formulas.h"

namespace meshtrain::plan {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string flops_str(double f) {
  if (f >= 1e15) return fmt("%.3f PFLOP", f / 1e15);
  if (f >= 1e12) return fmt("%.3f TFLOP", f / 1e12);
  if (f >= 1e9) return fmt("%.3f GFLOP", f / 1e9);
  return fmt("%.3f MFLOP", f / 1e6);
}

std::string seconds(double s) {
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.3f ms", s * 1e3);
  return fmt("%.1f us", s * 1e6);
}

int64_t cat(const MemorySnapshot& s, MemCategory c, bool peak) {
  return peak ? s.peak[size_t(c)] : s.current[size_t(c)];
}

// Calls and bytes per (phase, group, op kind) in step order of first use.
struct CommRow {
  std::string phase, group, op;
  int group_size = 1;
  int64_t calls = 0, bytes = 0;
  double wire = 0;  // bytes each rank sends on a ring (docs/math.md (M.20))
};

// The mesh's axes whose rank-0 group spans nodes (plan --nodes).
std::vector<std::string> groups_across_nodes(const Prediction& p, std::span<const comm::Axis> axes) {
  return axes_across_nodes(p.inputs, p.hardware ? &*p.hardware : nullptr, axes);
}

std::vector<CommRow> comm_rows(const comm::CommLedger& ledger) {
  std::vector<CommRow> rows;
  std::map<std::string, size_t> index;
  for (const comm::PlannedOp& op : ledger.ops()) {
    const std::string key = std::string(to_string(op.phase)) + "|" + op.group + "|" +
                            std::string(comm::op_kind_name(op.kind));
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, rows.size()).first;
      rows.push_back({to_string(op.phase), op.group, std::string(comm::op_kind_name(op.kind)), op.group_size});
    }
    CommRow& r = rows[it->second];
    r.calls += 1;
    r.bytes += op.bytes;
    r.wire += ring_wire_bytes(op.kind, op.group_size, double(op.bytes));
  }
  return rows;
}

constexpr MemCategory kCats[] = {MemCategory::Params,    MemCategory::Grads,     MemCategory::Optimizer,
                                 MemCategory::Activations, MemCategory::Gathered, MemCategory::Workspace,
                                 MemCategory::Comm};

}  // namespace

std::string render_text(const Prediction& p) {
  const StepInputs& in = p.inputs;
  std::ostringstream os;
  os << "model: " << in.model.describe() << "\n";
  os << "layout: " << in.mesh.str() << " | zero " << in.layout.zero_stage << " | world " << in.world()
     << " | schedule " << in.schedule << (in.recompute ? " | recompute" : "") << "\n";
  os << "precision: " << in.precision.describe() << "\n";
  os << "window: micro-batch " << in.micro_batch << " x " << in.seq_len << " positions, " << in.grad_accum
     << " per replica, " << in.mesh.dp << " replicas: " << in.global_rows()
     << " rows per update (R*B*G, docs/math.md (M.62))\n\n";

  os << "recorded: every memory category and collective below is the trainer's own step, run on the meta device "
        "(nothing computed, no memory touched)\n";
  for (const std::string& a : p.assumptions) os << "  assumes " << a << "\n";
  os << "\n";
  os << "memory per rank class (bytes as the caching allocator rounds them; peak = during a step):\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-16s %6s %11s %11s %11s | %11s %11s %11s %11s | %11s\n", "ranks", "count",
                "params", "grads", "optimizer", "activations", "gathered", "workspace", "comm", "peak");
  os << line;
  for (const RankClass& c : p.classes) {
    const MemorySnapshot& m = c.step.peak;
    std::snprintf(line, sizeof line, "  %-16s %6d %11s %11s %11s | %11s %11s %11s %11s | %11s\n",
                  ("pp " + std::to_string(c.pp) + " tp " + std::to_string(c.tp)).c_str(), c.step.count,
                  gib(double(cat(c.step.at_rest, MemCategory::Params, false))).c_str(),
                  gib(double(cat(c.step.at_rest, MemCategory::Grads, false))).c_str(),
                  gib(double(cat(c.step.at_rest, MemCategory::Optimizer, false))).c_str(),
                  gib(double(cat(m, MemCategory::Activations, true))).c_str(),
                  gib(double(cat(m, MemCategory::Gathered, true))).c_str(),
                  gib(double(cat(m, MemCategory::Workspace, true))).c_str(),
                  gib(double(cat(m, MemCategory::Comm, true))).c_str(), gib(double(m.total_peak)).c_str());
    os << line;
    if (c.peak_low.total_peak != c.peak_high.total_peak)
      os << "      communication buffers " << gib(double(cat(c.peak_low, MemCategory::Comm, true))) << " to "
         << gib(double(cat(c.peak_high, MemCategory::Comm, true))) << " and peak " << gib(double(c.peak_low.total_peak))
         << " to " << gib(double(c.peak_high.total_peak))
         << " as overlapped reductions finish at once or only when waited for\n";
    if (c.largest_unit_bytes > 0)
      os << "      ZeRO-3: largest gathered unit U = " << gib(double(c.largest_unit_bytes))
         << "; gathered peak (current + prefetched) " << gib(double(cat(m, MemCategory::Gathered, true))) << "\n";
    os << "      micro-batches in flight: " << c.step.live_micro_batches << "\n";
  }
  if (p.hardware)
    os << "  device memory " << gib(p.hardware->memory_bytes) << ": "
       << (p.fits() ? "fits" : "DOES NOT FIT") << " (peak " << gib(double(p.peak_bytes())) << ")\n";

  const RankClass& first = p.classes.front();
  os << "\ncommunication per step of rank " << first.step.rank << " (M = logical bytes as CommStats counts them, "
     << "docs/math.md (M.19); on the wire = what a ring sends, (M.20)):\n";
  std::snprintf(line, sizeof line, "  %-14s %-8s %-15s %6s %14s %14s\n", "phase", "group", "collective", "calls",
                "M", "on the wire");
  os << line;
  for (const CommRow& r : comm_rows(first.step.comm)) {
    std::snprintf(line, sizeof line, "  %-14s %-8s %-15s %6lld %14s %14s\n", r.phase.c_str(),
                  (r.group + "(" + std::to_string(r.group_size) + ")").c_str(), r.op.c_str(), (long long)r.calls,
                  format_bytes(r.bytes).c_str(), format_bytes(int64_t(r.wire)).c_str());
    os << line;
  }

  os << "\nFLOPs per step: model " << flops_str(p.model_flops_per_step) << " (6N + 12 L d s per token x "
     << in.global_rows() * in.seq_len << " tokens); executed " << flops_str(p.executed_flops_per_step)
     << " (causal attention computes half the scores" << (in.recompute ? "; recomputation included" : "") << ")\n";
  if (in.nodes > 0) {
    const int per_node = ranks_per_node(in, p.hardware ? &*p.hardware : nullptr);
    os << "\nplacement: " << in.nodes << " node(s) x " << per_node
       << " ranks, numbered node by node (tp innermost, then cp); groups across nodes, priced on [link.inter]:";
    const std::vector<std::string> across = groups_across_nodes(p, comm::kWorldAxes);
    for (const std::string& a : across) os << " " << a;
    if (across.empty()) os << " none";
    for (const std::string& a : groups_across_nodes(p, kLayerAxes))
      os << "\n  " << a << " ACROSS NODES: every layer's " << a
         << " collectives cross the link (meshtrain launch --allow-cross-node-tp runs it)";
    os << "\n";
  }
  if (p.time) {
    const StepTime& t = *p.time;
    os << "\npredicted step on " << p.hardware->name << " (" << p.hardware->path << "):\n";
    os << "  pipeline makespan " << seconds(t.makespan_s) << " (bubble " << fmt("%.1f%%", 100 * t.bubble)
       << "), exposed communication " << seconds(t.exposed_comm_s) << ", update " << seconds(t.update_s) << "\n";
    for (const RankTime& r : t.ranks)
      os << "  rank " << r.rank << ": compute " << seconds(r.compute_s) << " (tensor-parallel collectives "
         << seconds(r.tp_comm_s) << "), pipeline sends " << seconds(r.pp_comm_s) << ", gradient/parameter collectives " << seconds(r.grad_comm_s) << " of which exposed "
         << seconds(r.exposed_s) << ", optimizer " << seconds(r.optimizer_s) << ", publish " << seconds(r.publish_s)
         << "\n";
    const double tokens = double(in.global_rows() * in.seq_len);
    os << "  step " << seconds(t.step_s) << ", " << fmt("%.0f", tokens / t.step_s) << " tokens/s, MFU "
       << fmt("%.1f%%", 100 * t.mfu) << " (executed " << fmt("%.1f%%", 100 * t.hfu) << ")\n";
  }
  return os.str();
}

nlohmann::json render_json(const Prediction& p) {
  using nlohmann::json;
  const StepInputs& in = p.inputs;
  json j;
  j["model"] = in.model.describe();
  j["layout"] = {{"pp", in.mesh.pp}, {"dp", in.mesh.dp}, {"cp", in.mesh.cp}, {"tp", in.mesh.tp},
                 {"zero_stage", in.layout.zero_stage}, {"world", in.world()}, {"schedule", in.schedule},
                 {"recompute", in.recompute}, {"sequence_parallel", in.layout.sequence_parallel},
                 {"virtual_stages", in.layout.virtual_stages}};
  j["precision"] = in.precision.describe();
  j["assumptions"] = p.assumptions;
  j["window"] = {{"micro_batch", in.micro_batch}, {"seq_len", in.seq_len}, {"grad_accum", in.grad_accum},
                 {"global_rows", in.global_rows()}};
  auto snap = [](const MemorySnapshot& s, bool peak) {
    json m;
    for (MemCategory c : kCats) m[std::string(mem_category_name(c))] = cat(s, c, peak);
    m["total"] = peak ? s.total_peak : s.total_current;
    return m;
  };
  j["rank_classes"] = json::array();
  for (const RankClass& c : p.classes) {
    json k;
    k["rank"] = c.step.rank;
    k["pp"] = c.pp;
    k["tp"] = c.tp;
    k["count"] = c.step.count;
    k["at_rest"] = snap(c.step.at_rest, false);
    k["peak"] = snap(c.step.peak, true);
    k["peak_bracket"] = {{"reductions_done_at_once", snap(c.peak_low, true)},
                         {"reductions_done_when_waited", snap(c.peak_high, true)}};
    k["largest_gathered_unit"] = c.largest_unit_bytes;
    k["micro_batches_in_flight"] = c.step.live_micro_batches;
    k["flops"] = c.flops;
    json ops = json::array();
    for (const CommRow& r : comm_rows(c.step.comm))
      ops.push_back({{"phase", r.phase}, {"group", r.group}, {"group_size", r.group_size}, {"collective", r.op},
                     {"calls", r.calls}, {"bytes", r.bytes}, {"wire_bytes", r.wire}});
    k["communication"] = ops;
    j["rank_classes"].push_back(k);
  }
  j["flops"] = {{"model", p.model_flops_per_step}, {"executed", p.executed_flops_per_step}};
  j["peak_bytes"] = p.peak_bytes();
  if (in.nodes > 0)
    j["placement"] = {{"nodes", in.nodes}, {"ranks_per_node", ranks_per_node(in, p.hardware ? &*p.hardware : nullptr)},
                      {"groups_across_nodes", groups_across_nodes(p, comm::kWorldAxes)}};
  if (p.hardware) {
    j["hardware"] = {{"name", p.hardware->name}, {"file", p.hardware->path}, {"memory", p.hardware->memory_bytes},
                     {"fits", p.fits()}};
  }
  if (p.time) {
    const StepTime& t = *p.time;
    json ranks = json::array();
    for (const RankTime& r : t.ranks)
      ranks.push_back({{"rank", r.rank}, {"compute_s", r.compute_s}, {"tp_comm_s", r.tp_comm_s}, {"pp_comm_s", r.pp_comm_s},
                       {"grad_comm_s", r.grad_comm_s}, {"exposed_s", r.exposed_s}, {"optimizer_s", r.optimizer_s},
                       {"publish_s", r.publish_s}, {"bookkeeping_s", r.bookkeeping_s}});
    j["time"] = {{"step_s", t.step_s}, {"makespan_s", t.makespan_s}, {"bubble", t.bubble},
                 {"exposed_comm_s", t.exposed_comm_s}, {"update_s", t.update_s}, {"mfu", t.mfu}, {"hfu", t.hfu},
                 {"tokens_per_s", double(in.global_rows() * in.seq_len) / t.step_s}, {"ranks", ranks}};
  }
  return j;
}

}  // namespace meshtrain::plan
