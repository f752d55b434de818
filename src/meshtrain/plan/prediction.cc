#include "meshtrain/plan/prediction.h"

#include <algorithm>
#include <map>

#include "meshtrain/plan/compute_cost.h"

namespace meshtrain::plan {

namespace {

// Ranks with equal signatures hold the same pieces and run the same program.
std::string signature(const parallel::LayoutPlan& plan) {
  std::string s = std::to_string(plan.coord(comm::Axis::Pp));
  for (const model::ParamSpec& p : plan.spec().params) {
    s += '|';
    s += p.shape.str();
  }
  return s;
}

double executed_flops(const StepInputs& in, const RankStep& rep) {
  const model::ModelConfig& cfg = rep.plan->model_config();
  const ComputeModel cm(cfg, local_dims(cfg, rep.plan->spec()), in.precision, nullptr);
  const TraceBatch b = trace_batch(in);
  std::map<int, SegmentCost> seg;  // a segment's cost, once
  double flops = 0;
  for (const parallel::Action& a : rep.program.actions) {
    if (!parallel::is_compute(a.op)) continue;
    auto it = seg.find(a.segment);
    if (it == seg.end()) it = seg.emplace(a.segment, cm.segment(a.segment, b, in)).first;
    flops += action_cost(it->second, a.op).flops;
  }
  return flops;
}

}  // namespace

int64_t Prediction::peak_bytes() const {
  int64_t peak = 0;
  for (const RankClass& c : classes) peak = std::max(peak, c.step.peak.total_peak);
  return peak;
}

bool Prediction::fits() const {
  if (!hardware) return true;
  // CPU ranks share their node's memory; a GPU rank has its device's.
  if (hardware->shared_node)
    return double(peak_bytes()) * ranks_sharing_cores(inputs) <=
           hardware->memory_bytes * hardware->devices_per_node;
  return double(peak_bytes()) <= hardware->memory_bytes;
}

std::vector<std::string> assumptions(const StepInputs& in) {
  std::vector<std::string> out;
  if (in.model.n_experts > 0)
    out.push_back("mixture of experts: balanced routing, every expert receives n * top_k / n_experts of a row's "
                  "assignments (a real router's imbalance grows the expert buffers and the all-to-all)");
  return out;
}

Prediction predict(const StepInputs& in, const StepRecorder& record, const HardwareProfile* hw, bool brackets) {
  in.validate();
  parallel::validate(train_schedule(in));
  Prediction out;
  out.inputs = in;
  out.assumptions = assumptions(in);
  // One representative per signature among the ranks of data/context
  // coordinate 0; every dp x cp replica repeats them.
  std::map<std::string, size_t> seen;
  model::ModelConfig finalized = in.model;
  finalized.finalize();
  const auto global = std::make_shared<const model::ModelSpec>(model::build_model_spec(finalized));
  for (int pp = 0; pp < in.mesh.pp; ++pp)
    for (int tp = 0; tp < in.mesh.tp; ++tp) {
      comm::MeshCoords at;
      at[comm::Axis::Pp] = pp;
      at[comm::Axis::Tp] = tp;
      const int rank = in.mesh.rank_of(at);
      const parallel::LayoutPlan plan(in.model, in.mesh, rank, in.layout, global);
      const std::string sig = signature(plan);
      auto it = seen.find(sig);
      if (it != seen.end()) {
        out.classes[it->second].step.count += in.mesh.dp * in.mesh.cp;
        continue;
      }
      seen[sig] = out.classes.size();
      RankClass c;
      c.step = record(in, rank, 2);
      c.step.count = in.mesh.dp * in.mesh.cp;
      c.peak_low = brackets ? record(in, rank, 1).peak : c.step.peak;
      c.peak_high = brackets ? record(in, rank, kNeverCompletes).peak : c.step.peak;
      c.pp = pp;
      c.tp = tp;
      if (plan.shards().shards_params())
        for (int u = 0; u < plan.shards().num_units(); ++u)
          c.largest_unit_bytes = std::max<int64_t>(
              c.largest_unit_bytes, plan.shards().unit(u).padded * int64_t(dtype_size(in.precision.params)));
      c.flops = executed_flops(in, c.step);
      out.classes.push_back(std::move(c));
    }
  for (const RankClass& c : out.classes) out.executed_flops_per_step += c.flops * c.step.count;
  out.model_flops_per_step =
      model::model_flops_per_token(in.model, in.seq_len) * double(in.global_rows()) * double(in.seq_len);
  if (hw) {
    out.hardware = *hw;
    std::vector<RankStep> steps;
    for (const RankClass& c : out.classes) steps.push_back(c.step);
    out.time = predict_step_time(in, steps, *hw);
  }
  return out;
}

}  // namespace meshtrain::plan
