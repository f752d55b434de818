#include "meshtrain/parallel/param_gather.h"

namespace meshtrain::parallel {

ParamGather::ParamGather(const ShardPlan& plan, model::ParameterStore& store, const UnitGroups& groups,
                         std::shared_ptr<CachingAllocator> alloc, GradSyncStats& stats)
    : plan_(plan),
      store_(store),
      groups_(groups),
      alloc_(std::move(alloc)),
      stats_(stats),
      shards_(size_t(plan.num_units())),
      gathered_(size_t(plan.num_units())),
      work_(size_t(plan.num_units())) {
  const DType dt = store_.precision().params;
  for (int u = 0; u < plan_.num_units(); ++u)
    shards_[size_t(u)] = Tensor::zeros(Shape{plan_.unit(u).shard}, dt, alloc_, MemCategory::Params);
}

ParamGather::~ParamGather() {
  for (auto& w : work_)
    if (w.valid()) try { w.wait(); } catch (...) {}
}

void ParamGather::gather(int u) {
  if (u < 0 || u >= plan_.num_units() || gathered_[size_t(u)].defined() || plan_.unit(u).padded == 0) return;
  const DType dt = store_.precision().params;
  gathered_[size_t(u)] = Tensor::empty(Shape{plan_.unit(u).padded}, dt, alloc_, MemCategory::Gathered);
  work_[size_t(u)] = groups_.of(u).iall_gather(shards_[size_t(u)].raw(), gathered_[size_t(u)].raw(),
                                     size_t(plan_.unit(u).padded), dt);
}

void ParamGather::require(int u) {
  gather(u);  // no-op when already gathered or in flight
  if (work_[size_t(u)].valid()) {
    wait_timed(work_[size_t(u)], stats_);
    store_.bind_unit_values(u, gathered_[size_t(u)]);
  }
}

void ParamGather::release(int u) {
  if (!gathered_[size_t(u)].defined()) return;
  if (work_[size_t(u)].valid()) wait_timed(work_[size_t(u)], stats_);
  gathered_[size_t(u)] = Tensor();
  store_.bind_unit_values(u, Tensor());
}

void ParamGather::release_all() {
  for (int u = 0; u < plan_.num_units(); ++u) release(u);
}

}  // namespace meshtrain::parallel
