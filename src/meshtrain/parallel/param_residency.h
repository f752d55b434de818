// Where parameters live at rest and how a unit's values are made available
// around its forward and backward: the parameter side of the ZeRO stages of
// docs/math.md (M.26).
//   ReplicatedParams (stages 0-2): each held unit's full padded values,
//     bound into the model for good; under stages 1 and 2 the owners update
//     their shard only and publish it (all-gather) after the step;
//   ShardedParams (stage 3): the owned shard at rest, gathered per unit
//     around its use (param_gather.h).
// Both initialize their values from (seed, name, global index), so every
// layout starts identical.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "meshtrain/model/parameters.h"
#include "meshtrain/parallel/param_gather.h"
#include "meshtrain/parallel/shard_plan.h"
#include "meshtrain/parallel/sync_stats.h"
#include "meshtrain/parallel/unit_groups.h"

namespace meshtrain::parallel {

class ParamResidency {
 public:
  virtual ~ParamResidency() = default;
  virtual void gather(int /*u*/) {}   // start making u's values available
  virtual void require(int /*u*/) {}  // u's values must be bound now
  virtual void release(int /*u*/) {}  // u's values are not needed until the next gather
  virtual void release_all() {}
  // The values of unit u this rank keeps at rest, and the flat range of the
  // unit they cover.
  virtual Tensor held(int u) = 0;
  virtual std::pair<int64_t, int64_t> held_range(int u) const = 0;
  // The owned range of those values (the range the optimizer updates).
  virtual Tensor owned(int u) = 0;
  // After the owned ranges changed: bring every rank's held values up to date.
  virtual void publish() {}
};

class ReplicatedParams final : public ParamResidency {
 public:
  // publish: owners update only their shard (stages 1, 2), so the step ends
  // with an all-gather of the owned ranges.
  ReplicatedParams(const ShardPlan& plan, model::ParameterStore& store, const UnitGroups& groups,
                   const std::shared_ptr<CachingAllocator>& alloc, GradSyncStats& stats, uint64_t seed, bool publish);
  Tensor held(int u) override { return full_[size_t(u)]; }
  std::pair<int64_t, int64_t> held_range(int u) const override { return {0, plan_.unit(u).padded}; }
  Tensor owned(int u) override;
  void publish() override;

 private:
  const ShardPlan& plan_;
  const UnitGroups& groups_;
  GradSyncStats& stats_;
  bool publish_;
  std::vector<Tensor> full_;  // padded full values per unit
};

class ShardedParams final : public ParamResidency {
 public:
  ShardedParams(const ShardPlan& plan, model::ParameterStore& store, const UnitGroups& groups,
                const std::shared_ptr<CachingAllocator>& alloc, GradSyncStats& stats, uint64_t seed);
  void gather(int u) override { gather_.gather(u); }
  void require(int u) override { gather_.require(u); }
  void release(int u) override { gather_.release(u); }
  void release_all() override { gather_.release_all(); }
  Tensor held(int u) override { return gather_.shard(u); }
  std::pair<int64_t, int64_t> held_range(int u) const override;
  Tensor owned(int u) override { return gather_.shard(u); }

 private:
  const ShardPlan& plan_;
  ParamGather gather_;
};

// Fills dst (unit u's owned range) with the initial values of the
// parameters' elements there, from (seed, name, global index).
void init_owned_range(const ShardPlan& plan, int u, uint64_t seed, const Tensor& dst);

// The residency the plan's stage calls for.
std::unique_ptr<ParamResidency> make_param_residency(const ShardPlan& plan, model::ParameterStore& store,
                                                     const UnitGroups& groups,
                                                     const std::shared_ptr<CachingAllocator>& alloc,
                                                     GradSyncStats& stats, uint64_t seed);

}  // namespace meshtrain::parallel
