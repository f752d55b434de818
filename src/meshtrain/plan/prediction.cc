#include "meshtrain/plan/prediction.h"

#include <algorithm>
#include <map>

#include "meshtrain/plan/compute_cost.h"

namespace meshtrain::plan {

namespace {

// Ranks with equal signatures hold the same pieces and run the same program.
std::string signature(const parallel::LayoutPlan& plan) {
  std::string s = std::to_string(plan.coord("pp"));
  for (const model::ParamSpec& p : plan.spec().params) {
    s += '|';
    s += p.shape.str();
  }
  return s;
}

double executed_flops(const StepInputs& in, const StepReplay& rep) {
  const model::ModelConfig& cfg = rep.plan->model_config();
  const ComputeModel cm(cfg, model::local_dims(cfg, rep.plan->spec()), in.precision, nullptr);
  const model::TraceBatch b{in.micro_batch, in.seq_len};
  double flops = 0;
  for (const parallel::Action& a : rep.program.actions) {
    if (!parallel::is_compute(a.op)) continue;
    const SegmentCost c = cm.segment(a.segment, b, in.recompute);
    if (a.op == parallel::Op::Forward) flops += c.f.flops;
    if (a.op == parallel::Op::Backward || a.op == parallel::Op::BackwardInput) flops += c.b.flops;
    if (a.op == parallel::Op::Backward || a.op == parallel::Op::BackwardWeight) flops += c.w.flops;
  }
  return flops;
}

}  // namespace

int64_t Prediction::peak_bytes() const {
  int64_t peak = 0;
  for (const RankClass& c : classes) peak = std::max(peak, c.replay.peak.total_peak);
  return peak;
}

bool Prediction::fits() const {
  if (!hardware) return true;
  // CPU ranks share one node's memory; a GPU rank has its device's.
  if (hardware->shared_node)
    return double(peak_bytes()) * inputs.world() <= hardware->memory_bytes * hardware->devices_per_node;
  return double(peak_bytes()) <= hardware->memory_bytes;
}

std::vector<std::string> unvalidated_parts(const StepInputs& in) {
  std::vector<std::string> out;
  if (in.mesh.cp > 1)
    out.push_back("context parallelism is not replayed yet: each cp rank is replayed as a data-parallel replica "
                  "holding whole sequences (no ring K/V exchange)");
  if (in.mesh.ep > 1 || in.model.n_experts > 0)
    out.push_back("mixture of experts and expert parallelism: the experts' compute and all-to-all are not replayed "
                  "yet (dense feed-forward layers stand in for them); the expert units' state, gradient reductions "
                  "(over edp) and ZeRO are");
  return out;
}

Prediction predict(const StepInputs& in, const HardwareProfile* hw, bool brackets) {
  in.validate();
  parallel::validate(train_schedule(in));  // once for every class below
  Prediction out;
  out.inputs = in;
  out.unvalidated = unvalidated_parts(in);
  // One representative per signature among the ranks of data/context
  // coordinate 0; every dp x cp replica repeats them.
  std::map<std::string, size_t> seen;
  const ModelGroupLists lists = model_group_lists(in, 0, true);  // every class below is at data coordinate 0
  for (int pp = 0; pp < in.mesh.pp; ++pp)
    for (int tp = 0; tp < in.mesh.tp; ++tp) {
      const int rank = in.mesh.rank_of({{"pp", pp}, {"dp", 0}, {"cp", 0}, {"tp", tp}});
      const parallel::LayoutPlan plan(in.model, in.mesh, rank, in.layout);
      const std::string sig = signature(plan);
      auto it = seen.find(sig);
      if (it != seen.end()) {
        out.classes[it->second].replay.count += in.mesh.dp * in.mesh.cp;
        continue;
      }
      seen[sig] = out.classes.size();
      RankClass c;
      c.replay = replay_step(in, rank, 2, true, &lists);
      c.replay.count = in.mesh.dp * in.mesh.cp;
      c.peak_low = brackets ? replay_step(in, rank, 1, true, &lists).peak : c.replay.peak;
      c.peak_high = brackets ? replay_step(in, rank, kNeverCompletes, true, &lists).peak : c.replay.peak;
      c.pp = pp;
      c.tp = tp;
      if (c.replay.plan->shards().shards_params())
        for (int u = 0; u < plan.shards().num_units(); ++u)
          c.largest_unit_bytes = std::max<int64_t>(
              c.largest_unit_bytes, plan.shards().unit(u).padded * int64_t(dtype_size(in.precision.params)));
      c.flops = executed_flops(in, c.replay);
      out.classes.push_back(std::move(c));
    }
  for (const RankClass& c : out.classes) out.executed_flops_per_step += c.flops * c.replay.count;
  out.model_flops_per_step =
      model::model_flops_per_token(in.model, in.seq_len) * double(in.global_rows()) * double(in.seq_len);
  if (hw) {
    out.hardware = *hw;
    std::vector<StepReplay> replays;
    for (const RankClass& c : out.classes) replays.push_back(c.replay);
    out.time = predict_step_time(in, replays, *hw);
  }
  return out;
}

}  // namespace meshtrain::plan
