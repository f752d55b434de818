#include "meshtrain/plan/step_time.h"

#include <algorithm>
#include <map>
#include <set>

#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/plan/compute_cost.h"
#include "meshtrain/plan/formulas.h"

namespace meshtrain::plan {

parallel::Schedule train_schedule(const StepInputs& in) {
  return parallel::make_schedule(in.schedule, in.mesh.pp, int(in.grad_accum), in.layout.virtual_stages);
}

namespace {

// Ranks of `rank`'s group over `axes` ("pp+tp": the axes joined by '+';
// "world": every rank).
std::vector<int> group_members(const comm::MeshShape& mesh, int rank, const std::string& key) {
  if (key == "world") {
    std::vector<int> out;
    for (int r = 0; r < mesh.world_size(); ++r) out.push_back(r);
    return out;
  }
  // The engine's sub-groups ("pp.tie", "tp/share2") lie inside their parent.
  return mesh.members(rank, comm::Axes::parse(key.substr(0, key.find_first_of("./"))));
}

// Devices (cores) one rank computes on: a GPU rank has one; CPU ranks share
// the node's cores unless their thread count is fixed.
double rank_speed(const HardwareProfile& hw, const StepInputs& in) {
  if (!hw.shared_node) return 1.0;
  const double share = double(hw.devices_per_node) / double(in.world());
  return in.threads_per_rank > 0 ? std::min<double>(in.threads_per_rank, share) : share;
}

}  // namespace

bool crosses_nodes(const comm::MeshShape& mesh, int rank, const std::string& group, const HardwareProfile& hw) {
  const std::vector<int> members = group_members(mesh, rank, group);
  const int node = members.front() / hw.devices_per_node;
  return std::any_of(members.begin(), members.end(), [&](int r) { return r / hw.devices_per_node != node; });
}

double op_seconds(const comm::PlannedOp& op, bool inter_node, const HardwareProfile& hw) {
  if (op.group_size <= 1) return 0;
  const AlphaBeta& ab = (inter_node ? hw.inter : hw.intra).for_op(op.kind);
  return ring_time(op.kind, op.group_size, double(op.bytes), ab.alpha_s, 1.0 / ab.bytes_per_s);
}

StepTime predict_step_time(const StepInputs& in, const std::vector<RankStep>& steps, const HardwareProfile& hw) {
  StepTime out;
  const TraceBatch b = trace_batch(in);
  const double G = double(in.grad_accum);
  double f = 0, bw = 0, w = 0, flops = 0, update = 0;
  for (const RankStep& rep : steps) {
    const parallel::LayoutPlan& plan = *rep.plan;
    const model::ModelConfig& cfg = plan.model_config();
    const ComputeModel cm(cfg, local_dims(cfg, plan.spec()), in.precision, &hw, rank_speed(hw, in),
                          in.execution.fused_attention);
    // Activations on the wire in the executing framework's type.
    const double wire = double(dtype_size(in.execution.activation_wire)) / double(dtype_size(in.precision.accumulate()));
    std::map<int, SegmentCost> seg;
    auto cost = [&](int s) -> const SegmentCost& {
      auto it = seg.find(s);
      if (it == seg.end()) it = seg.emplace(s, cm.segment(s, b, in.recompute)).first;
      return it->second;
    };
    std::map<int, std::vector<const comm::PlannedOp*>> by_action;
    for (const comm::PlannedOp& op : rep.comm.ops()) by_action[op.action].push_back(&op);
    std::map<std::string, bool> inter;  // per group: crosses nodes
    auto secs = [&](const comm::PlannedOp& op) {
      auto it = inter.find(op.group);
      if (it == inter.end()) it = inter.emplace(op.group, crosses_nodes(in.mesh, rep.rank, op.group, hw)).first;
      if (op.group != "tp" && op.group != "pp") return op_seconds(op, it->second, hw);
      comm::PlannedOp scaled = op;
      scaled.bytes = int64_t(double(op.bytes) * wire);
      return op_seconds(scaled, it->second, hw);
    };

    RankTime rt;
    rt.rank = rep.rank;
    double clock = 0, rank_flops = 0;
    std::map<std::string, double> stream;  // a group's operations run in order
    std::map<int, double> gathered_at;     // unit -> when its gather completes
    for (size_t i = 0; i < rep.program.actions.size(); ++i) {
      const parallel::Action& a = rep.program.actions[i];
      const auto& ops = by_action[int(i)];
      if (parallel::is_compute(a.op)) {
        const PassCost p = action_cost(cost(a.segment), a.op);
        double tp = 0;
        for (const comm::PlannedOp* op : ops) tp += secs(*op);  // blocking collectives inside the layers
        const double dur = p.seconds + tp;
        clock += dur;
        rt.compute_s += dur;
        rt.tp_comm_s += tp;
        rank_flops += p.flops;
        if (a.op == parallel::Op::Forward) rt.chunk_f += dur / G;
        else if (a.op == parallel::Op::BackwardWeight) rt.chunk_w += dur / G;
        else rt.chunk_b += dur / G;
        continue;
      }
      for (const comm::PlannedOp* op : ops) {
        // Pipeline transfers are in the schedule's makespan; a tree level's
        // receive pairs with its send.
        if (op->group == "pp" || op->kind == comm::OpKind::Recv) continue;
        const double t = secs(*op);
        rt.grad_comm_s += t;
        if (op->kind == comm::OpKind::Send) {  // reproducible mode: blocking exchanges
          clock += t;
          rt.exposed_s += t;
          continue;
        }
        double& free_at = stream[op->group];
        free_at = std::max(free_at, clock) + t;
        if (a.op == parallel::Op::Gather || a.op == parallel::Op::Require) gathered_at[a.unit] = free_at;
      }
      if (a.op == parallel::Op::Require) {
        auto it = gathered_at.find(a.unit);
        if (it != gathered_at.end() && it->second > clock) {
          rt.exposed_s += it->second - clock;
          clock = it->second;
        }
      }
    }
    for (const auto& [group, free_at] : stream)  // finish_grads: the tail
      if (free_at > clock) {
        rt.exposed_s += free_at - clock;
        clock = free_at;
      }
    for (const comm::PlannedOp* op : by_action[-1])
      (op->phase == comm::StepPhase::Publish ? rt.publish_s : rt.bookkeeping_s) += secs(*op);
    int64_t owned = 0;
    for (int u = 0; u < plan.shards().num_units(); ++u) owned += plan.shards().owned_numel(u);
    rt.optimizer_s = cm.optimizer_seconds(owned);
    f = std::max(f, rt.chunk_f);
    bw = std::max(bw, rt.chunk_b);
    w = std::max(w, rt.chunk_w);
    out.exposed_comm_s = std::max(out.exposed_comm_s, rt.exposed_s);
    // An overlapped publication hides behind the next step's warm-up
    // forwards: p - 1 of them under 1F1B (at least the first micro-batch's),
    // 2 (p - 1) + (v - 1) p chunk forwards of f / v each when interleaved.
    const double p = double(in.mesh.pp), v = double(in.interleave), m = double(in.grad_accum);
    const double warmup = in.interleave > 1 ? std::min(m * v, 2 * (p - 1) + (v - 1) * p) * rt.chunk_f / v
                                            : std::min(m, std::max(1.0, p - 1)) * rt.chunk_f;
    const double publish =
        in.execution.overlap_param_gather ? std::max(0.0, rt.publish_s - warmup) : rt.publish_s;
    update = std::max(update, rt.optimizer_s + publish + rt.bookkeeping_s);
    flops += rank_flops * rep.count;
    out.ranks.push_back(rt);
  }
  // The slowest stage sets the beat (docs/math.md, "Rule: stage partitioning"): simulate the schedule (M.45).
  if (in.interleave > 1) {
    // Interleaved 1F1B: the fill and drain shrink by v (the rank's f, b
    // and w cover all its chunks).
    const double m = double(in.grad_accum), p = double(in.mesh.pp), v = double(in.interleave);
    out.makespan_s = (m + (p - 1) / v) * (f + bw + w);
    out.bubble = (p - 1) / v / (m + (p - 1) / v);
  } else {
    // The schedule the trainer expanded; f, b and w cover all of a rank's
    // chunks, each chunk takes its share.
    const double v = double(in.layout.virtual_stages);
    const parallel::SimResult sim = parallel::simulate(train_schedule(in), f / v, bw / v, w / v);
    out.makespan_s = sim.makespan;
    out.bubble = sim.bubble;
  }
  out.update_s = update;
  out.step_s = out.makespan_s + out.exposed_comm_s + update;
  out.flops = flops;
  const double tokens = double(in.global_rows()) * double(in.seq_len);
  out.model_flops = model::model_flops_per_token(in.model, in.seq_len) * tokens;
  // CPU ranks share one node's cores: the cores they compute on.
  const double devices = hw.shared_node ? std::min(double(hw.devices_per_node), rank_speed(hw, in) * in.world())
                                        : double(in.world());
  const double peak = hw.peak(in.precision.compute) * devices;
  out.mfu = out.model_flops / (out.step_s * peak);
  out.hfu = out.flops / (out.step_s * peak);
  return out;
}

}  // namespace meshtrain::plan
