#include "meshtrain/parallel/param_residency.h"

namespace meshtrain::parallel {

ReplicatedParams::ReplicatedParams(const ShardPlan& plan, model::ParameterStore& store, const UnitGroups& groups,
                                   const std::shared_ptr<CachingAllocator>& alloc, GradSyncStats& stats,
                                   uint64_t seed, bool publish)
    : plan_(plan), groups_(groups), stats_(stats), publish_(publish), full_(size_t(plan.num_units())) {
  for (int u = 0; u < plan_.num_units(); ++u) {
    if (plan_.unit(u).padded == 0) continue;
    full_[size_t(u)] = Tensor::zeros(Shape{plan_.unit(u).padded}, store.precision().params, alloc, MemCategory::Params);
    store.bind_unit_values(u, full_[size_t(u)]);
  }
  store.initialize(seed);
}

Tensor ReplicatedParams::owned(int u) {
  const UnitShard& s = plan_.unit(u);
  if (s.padded == 0) return Tensor();
  return full_[size_t(u)].flat_slice(s.owned_begin, s.owned_end);
}

void ReplicatedParams::publish() {
  if (!publish_) return;
  std::vector<comm::Work> works;
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitShard& s = plan_.unit(u);
    if (s.padded == 0) continue;
    const Tensor& full = full_[size_t(u)];
    works.push_back(groups_.of(u).iall_gather(full.flat_slice(s.owned_begin, s.owned_end).raw(), full.raw(),
                                              size_t(s.padded), full.dtype()));
  }
  for (auto& w : works) wait_timed(w, stats_);
}

ShardedParams::ShardedParams(const ShardPlan& plan, model::ParameterStore& store, const UnitGroups& groups,
                             const std::shared_ptr<CachingAllocator>& alloc, GradSyncStats& stats, uint64_t seed)
    : plan_(plan), gather_(plan, store, groups, alloc, stats) {
  for (int u = 0; u < plan_.num_units(); ++u) init_owned_range(plan_, u, seed, gather_.shard(u));
}

std::pair<int64_t, int64_t> ShardedParams::held_range(int u) const {
  return {plan_.unit(u).owned_begin, plan_.unit(u).owned_end};
}

void init_owned_range(const ShardPlan& plan, int u, uint64_t seed, const Tensor& dst) {
  for (const OwnedPiece& p : plan.owned_pieces(u)) {
    const int64_t local = p.unit_offset - plan.unit(u).owned_begin;
    model::init_param_range(plan.spec().params[size_t(p.param)], seed, p.param_begin,
                            dst.flat_slice(local, local + (p.param_end - p.param_begin)));
  }
}

std::unique_ptr<ParamResidency> make_param_residency(const ShardPlan& plan, model::ParameterStore& store,
                                                     const UnitGroups& groups,
                                                     const std::shared_ptr<CachingAllocator>& alloc,
                                                     GradSyncStats& stats, uint64_t seed) {
  if (plan.shards_params()) return std::make_unique<ShardedParams>(plan, store, groups, alloc, stats, seed);
  return std::make_unique<ReplicatedParams>(plan, store, groups, alloc, stats, seed, plan.shards_optimizer());
}

}  // namespace meshtrain::parallel
