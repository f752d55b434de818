#include "meshtrain/parallel/global_values.h"

namespace meshtrain::parallel {

std::vector<double> gather_global_values(DataParallel& engine, comm::ProcessGroup& model_group, bool grads) {
  const LayoutPlan& plan = engine.layout();
  const model::ModelSpec global = model::build_model_spec(plan.model_config());
  std::vector<int64_t> base(global.params.size() + 1, 0);
  for (size_t i = 0; i < global.params.size(); ++i) base[i + 1] = base[i] + global.params[i].numel();
  // Dense parameters and routed experts apart: experts are held by their
  // owners only (and their copies differ across the expert-parallel axis),
  // so they are summed over the model axes times ep.
  std::vector<double> out(size_t(base.back()), 0.0), experts;
  const bool any_experts = plan.model_config().n_experts > 0;
  if (any_experts) experts.assign(out.size(), 0.0);
  const model::ModelSpec& local = plan.spec();
  for (int u = 0; u < int(local.units.size()); ++u) {
    const std::vector<double> unit = engine.gather_unit(u, grads);  // collective over the unit's group
    for (int i : local.units[size_t(u)].params) {
      if (!plan.param(i).counts_in_norm) continue;  // another rank's copy is the counted one
      const model::ParamSpec& p = local.params[size_t(i)];
      double* dst = (p.expert >= 0 ? experts.data() : out.data()) + base[size_t(p.global_index)];
      for (int64_t e = 0; e < p.numel(); ++e) dst[p.global_flat(e)] = unit[size_t(p.unit_offset + e)];
    }
  }
  // Every element has exactly one writer and zeros elsewhere: the sums are exact.
  if (model_group.size() > 1) model_group.all_reduce(out.data(), out.size(), DType::F64, comm::ReduceOp::Sum);
  if (any_experts) {
    comm::ProcessGroup& holders = engine.expert_model_group();
    if (holders.size() > 1) holders.all_reduce(experts.data(), experts.size(), DType::F64, comm::ReduceOp::Sum);
    for (size_t i = 0; i < out.size(); ++i) out[i] += experts[i];
  }
  return out;
}

}  // namespace meshtrain::parallel
