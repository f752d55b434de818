#include "meshtrain/plan/step_time.h"

#include <algorithm>
#include <map>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/plan/compute_cost.h"
#include "meshtrain/comm/reduce_kernels.h"
#include "meshtrain/plan/formulas.h"
#include "meshtrain/plan/hierarchical_cost.h"

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
// their node's cores unless their thread count is fixed.
double rank_speed(const HardwareProfile& hw, const StepInputs& in) {
  if (!hw.shared_node) return 1.0;
  const double share = double(hw.devices_per_node) / double(ranks_sharing_cores(in));
  return in.threads_per_rank > 0 ? std::min<double>(in.threads_per_rank, share) : share;
}

}  // namespace

int ranks_per_node(const StepInputs& in, const HardwareProfile* hw) {
  if (in.nodes == 0) return hw ? hw->devices_per_node : in.world();
  const int per_node = in.world() / in.nodes;
  MT_REQUIRE(ConfigError, !hw || hw->shared_node || per_node <= hw->devices_per_node, "--nodes ", in.nodes, " puts ",
             per_node, " ranks of ", in.mesh.str(), " on each node, but a node of ", hw ? hw->path : "",
             " has node.devices = ", hw ? hw->devices_per_node : 0, ": give more nodes");
  return per_node;
}

int ranks_sharing_cores(const StepInputs& in) { return in.nodes > 0 ? in.world() / in.nodes : in.world(); }

bool crosses_nodes(const StepInputs& in, int rank, const std::string& group, const HardwareProfile* hw) {
  const int per_node = ranks_per_node(in, hw);
  const std::vector<int> members = group_members(in.mesh, rank, group);
  return std::any_of(members.begin(), members.end(), [&](int r) { return r / per_node != rank / per_node; });
}

GroupLink group_link(const StepInputs& in, int rank, const std::string& group, const HardwareProfile& hw) {
  const int per_node = ranks_per_node(in, &hw);
  const std::vector<int> members = group_members(in.mesh, rank, group);
  const int here = int(std::count_if(members.begin(), members.end(),
                                     [&](int r) { return r / per_node == rank / per_node; }));
  if (here == int(members.size())) return {&hw.intra, false, 1.0};  // inside the rank's node
  CrossingLink across = crossing_link(hw, here, per_node);
  // Without --nodes a CPU profile's nodes are groups of one machine's cores,
  // priced as before the option: a crossing group has the link whole.
  if (in.nodes == 0) across.share = 1;
  return {across.link, true, across.share};
}

std::vector<std::string> axes_across_nodes(const StepInputs& in, const HardwareProfile* hw,
                                           std::span<const comm::Axis> axes) {
  std::vector<std::string> out;
  for (comm::Axis axis : axes) {
    const std::string name(comm::axis_name(axis));
    if (in.mesh.size(axis) > 1 && crosses_nodes(in, 0, name, hw)) out.push_back(name);
  }
  return out;
}

double op_seconds(const comm::PlannedOp& op, const LinkProfile& link) {
  if (op.group_size <= 1) return 0;
  const AlphaBeta& ab = link.for_op(op.kind);
  return ring_time(op.kind, op.group_size, double(op.bytes), ab.alpha_s, 1.0 / ab.bytes_per_s);
}

namespace {

// One rank class's step walked action by action on a clock: compute with
// its blocking tp collectives, gradient and gather collectives queued per
// group behind one another, waits where a gathered unit is required or the
// tail of the reductions is still running.
class RankWalk {
 public:
  RankWalk(const StepInputs& in, const RankStep& rep, const HardwareProfile& hw)
      : in_(in),
        rep_(rep),
        hw_(hw),
        batch_(trace_batch(in)),
        cm_(rep.plan->model_config(), local_dims(rep.plan->model_config(), rep.plan->spec()), in.precision, &hw,
            rank_speed(hw, in), in.execution.fused_attention),
        // Activations on the wire in the executing framework's type.
        wire_(double(dtype_size(in.execution.activation_wire)) / double(dtype_size(in.precision.accumulate()))) {
    for (const comm::PlannedOp& op : rep.comm.ops()) by_action_[op.action].push_back(&op);
    rt_.rank = rep.rank;
  }

  RankTime run() {
    for (size_t i = 0; i < rep_.program.actions.size(); ++i) {
      const parallel::Action& a = rep_.program.actions[i];
      if (parallel::is_compute(a.op))
        compute(a, by_action_[int(i)]);
      else
        communicate(a, by_action_[int(i)]);
    }
    for (const auto& [group, free_at] : stream_) wait_until(free_at);  // finish_grads: the tail
    for (const comm::PlannedOp* op : by_action_[-1])
      (op->phase == comm::StepPhase::Publish ? rt_.publish_s : rt_.bookkeeping_s) += seconds(*op);
    const parallel::LayoutPlan& plan = *rep_.plan;
    int64_t owned = 0;
    for (int u = 0; u < plan.shards().num_units(); ++u) owned += plan.shards().owned_numel(u);
    rt_.optimizer_s = cm_.optimizer_seconds(owned);
    return rt_;
  }
  double flops() const { return flops_; }

 private:
  const SegmentCost& cost(int s) {
    auto it = seg_.find(s);
    if (it == seg_.end()) it = seg_.emplace(s, cm_.segment(s, batch_, in_)).first;
    return it->second;
  }
  // On the link the group crosses (group_link); a part p of its bandwidth
  // moves the bytes 1 / p times as long.
  double seconds(const comm::PlannedOp& op) {
    if (const std::optional<double> t = hierarchical_seconds_of(op)) return *t;
    auto it = links_.find(op.group);
    if (it == links_.end()) it = links_.emplace(op.group, group_link(in_, rep_.rank, op.group, hw_)).first;
    const double wire = op.group == "tp" || op.group == "pp" ? wire_ : 1.0;
    if (wire == 1.0 && it->second.share == 1.0) return op_seconds(op, *it->second.link);
    comm::PlannedOp scaled = op;
    scaled.bytes = int64_t(double(op.bytes) * wire / it->second.share);
    return op_seconds(scaled, *it->second.link);
  }
  // A data-parallel group's collective that runs hierarchically across
  // nodes (hierarchical_cost.h; 16-bit sums stay flat, as the trainer's).
  std::optional<double> hierarchical_seconds_of(const comm::PlannedOp& op) {
    auto it = layouts_.find(op.group);
    if (it == layouts_.end())
      it = layouts_.emplace(op.group, data_group_layout(in_.mesh, rep_.rank, op.group, ranks_per_node(in_, &hw_))).first;
    const bool half_sum = op.kind != comm::OpKind::AllGather && comm::is_half(in_.precision.grad_reduce);
    if (!it->second || half_sum || !runs_hierarchical(in_.hierarchical, op.kind, *it->second, double(op.bytes), hw_))
      return std::nullopt;
    return hierarchical_seconds(op.kind, *it->second, double(op.bytes), hw_);
  }
  void wait_until(double t) {
    if (t <= clock_) return;
    rt_.exposed_s += t - clock_;
    clock_ = t;
  }
  void compute(const parallel::Action& a, const std::vector<const comm::PlannedOp*>& ops) {
    const PassCost p = action_cost(cost(a.segment), a.op);
    double tp = 0;
    for (const comm::PlannedOp* op : ops) tp += seconds(*op);  // blocking collectives inside the layers
    const double dur = p.seconds + tp, G = double(in_.grad_accum);
    clock_ += dur;
    rt_.compute_s += dur;
    rt_.tp_comm_s += tp;
    flops_ += p.flops;
    if (a.op == parallel::Op::Forward) rt_.chunk_f += dur / G;
    else if (a.op == parallel::Op::BackwardWeight) rt_.chunk_w += dur / G;
    else rt_.chunk_b += dur / G;
  }
  void communicate(const parallel::Action& a, const std::vector<const comm::PlannedOp*>& ops) {
    for (const comm::PlannedOp* op : ops) {
      // A pipeline transfer arrives at the next (previous) stage that long
      // after its send: the schedule's simulation waits for it (docs/math.md
      // (M.67)). Its receive pairs with it, as a tree level's does.
      if (op->kind == comm::OpKind::Recv) continue;
      if (op->group == "pp") {
        const double t = seconds(*op);
        rt_.pp_comm_s += t;
        rt_.pp_transfer_s = std::max(rt_.pp_transfer_s, t);
        continue;
      }
      const double t = seconds(*op);
      rt_.grad_comm_s += t;
      if (op->kind == comm::OpKind::Send) {  // reproducible mode: blocking exchanges
        clock_ += t;
        rt_.exposed_s += t;
        continue;
      }
      double& free_at = stream_[op->group];
      free_at = std::max(free_at, clock_) + t;
      if (a.op == parallel::Op::Gather || a.op == parallel::Op::Require) gathered_at_[a.unit] = free_at;
    }
    if (a.op == parallel::Op::Require) {
      auto it = gathered_at_.find(a.unit);
      if (it != gathered_at_.end()) wait_until(it->second);
    }
  }

  const StepInputs& in_;
  const RankStep& rep_;
  const HardwareProfile& hw_;
  const TraceBatch batch_;
  const ComputeModel cm_;
  const double wire_;
  std::map<int, SegmentCost> seg_;
  std::map<int, std::vector<const comm::PlannedOp*>> by_action_;
  std::map<std::string, GroupLink> links_;  // per group
  std::map<std::string, std::optional<comm::NodeLayout>> layouts_;  // per data-parallel group: its nodes
  std::map<std::string, double> stream_;  // a group's operations run in order
  std::map<int, double> gathered_at_;     // unit -> when its gather completes
  RankTime rt_;
  double clock_ = 0, flops_ = 0;
};

// The update after the schedule: the optimizer, the publication (an
// overlapped one hides behind the next step's warm-up forwards: p - 1 of
// them under 1F1B, at least the first micro-batch's; 2 (p - 1) + (v - 1) p
// chunk forwards of f / v each when interleaved) and the small collectives.
double update_seconds(const StepInputs& in, const RankTime& rt) {
  const double p = double(in.mesh.pp), v = double(in.interleave), m = double(in.grad_accum);
  const double warmup = in.interleave > 1 ? std::min(m * v, 2 * (p - 1) + (v - 1) * p) * rt.chunk_f / v
                                          : std::min(m, std::max(1.0, p - 1)) * rt.chunk_f;
  const double publish = in.execution.overlap_param_gather ? std::max(0.0, rt.publish_s - warmup) : rt.publish_s;
  return rt.optimizer_s + publish + rt.bookkeeping_s;
}

// Pipeline replicas whose ranks of one stage share a node's cores: CPU
// ranks that outnumber their node's cores, k = min(dp, ranks a node /
// (tp cp)) of them (ranks numbered tp innermost, then cp, then dp). They
// run their micro-batches independently, so while one waits in the bubble
// the others take its share of the cores (docs/math.md (M.72)); tp and cp
// partners wait for each other at every collective and fill nothing.
int bubble_sharing_replicas(const StepInputs& in, const HardwareProfile& hw) {
  if (in.mesh.pp < 2 || !hw.shared_node || rank_speed(hw, in) >= 1.0) return 1;
  const int lockstep = in.mesh.tp * in.mesh.cp;
  return std::clamp(ranks_sharing_cores(in) / lockstep, 1, in.mesh.dp);
}

// The slowest stage sets the beat (docs/math.md, "Rule: stage
// partitioning"): the schedule simulated with the slowest rank's f, b and
// w, which cover all of a rank's chunks (M.45); replicas sharing cores
// fill each other's bubble (M.72).
void schedule_span(const StepInputs& in, double f, double b, double w, double transfer, int sharing,
                   StepTime& out) {
  if (in.interleave > 1) {
    // Interleaved 1F1B: the fill and drain shrink by v.
    const double m = double(in.grad_accum), p = double(in.mesh.pp), v = double(in.interleave);
    out.makespan_s = (m + (p - 1) / v) * (f + b + w);
    out.bubble = (p - 1) / v / (m + (p - 1) / v);
    return;
  }
  const double v = double(in.layout.virtual_stages);  // each chunk takes its share
  const parallel::Schedule schedule = train_schedule(in);
  parallel::ChunkCosts costs;
  costs.f.assign(size_t(schedule.chunks()), f / v);
  costs.b.assign(size_t(schedule.chunks()), b / v);
  costs.w.assign(size_t(schedule.chunks()), w / v);
  costs.latency = transfer;
  const parallel::SimResult sim = parallel::simulate(schedule, costs);
  const double busy = double(in.grad_accum) * (f + b + w);
  out.makespan_s = sharing > 1 ? busy + std::max(0.0, sim.makespan - busy) / sharing : sim.makespan;
  out.bubble = sharing > 1 ? 1.0 - busy / out.makespan_s : sim.bubble;
}

// MFU and HFU over the devices the ranks compute on (CPU ranks share one
// node's cores).
void utilization(const StepInputs& in, const HardwareProfile& hw, StepTime& out) {
  const double tokens = double(in.global_rows()) * double(in.seq_len);
  out.model_flops = model::model_flops_per_token(in.model, in.seq_len) * tokens;
  const double nodes = double(in.world() / ranks_sharing_cores(in));
  const double devices = hw.shared_node ? std::min(hw.devices_per_node * nodes, rank_speed(hw, in) * in.world())
                                        : double(in.world());
  const double peak = hw.peak(in.precision.compute) * devices;
  out.mfu = out.model_flops / (out.step_s * peak);
  out.hfu = out.flops / (out.step_s * peak);
}

}  // namespace

StepTime predict_step_time(const StepInputs& in, const std::vector<RankStep>& steps, const HardwareProfile& hw) {
  StepTime out;
  double f = 0, b = 0, w = 0, transfer = 0;
  for (const RankStep& rep : steps) {
    RankWalk walk(in, rep, hw);
    const RankTime rt = walk.run();
    f = std::max(f, rt.chunk_f);
    b = std::max(b, rt.chunk_b);
    w = std::max(w, rt.chunk_w);
    transfer = std::max(transfer, rt.pp_transfer_s);
    out.exposed_comm_s = std::max(out.exposed_comm_s, rt.exposed_s);
    out.update_s = std::max(out.update_s, update_seconds(in, rt));
    out.flops += walk.flops() * rep.count;
    out.ranks.push_back(rt);
  }
  schedule_span(in, f, b, w, transfer, bubble_sharing_replicas(in, hw), out);
  out.step_s = out.makespan_s + out.exposed_comm_s + out.update_s;
  utilization(in, hw, out);
  return out;
}

}  // namespace meshtrain::plan
