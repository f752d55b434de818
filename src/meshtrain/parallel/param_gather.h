// ZeRO stage 3 of docs/math.md (M.26): parameters rest as this rank's shard
// of each unit and are all-gathered into a full unit buffer just before a
// segment uses them (started early by Gather actions: prefetch in the
// schedule's order), bound into the model while in use and freed on Release.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/model/parameters.h"
#include "meshtrain/parallel/shard_plan.h"
#include "meshtrain/parallel/sync_stats.h"
#include "meshtrain/parallel/unit_groups.h"

namespace meshtrain::parallel {

class ParamGather {
 public:
  ParamGather(const ShardPlan& plan, model::ParameterStore& store, const UnitGroups& groups,
              std::shared_ptr<CachingAllocator> alloc, GradSyncStats& stats);
  ~ParamGather();  // never leaves a gather writing into freed memory
  ParamGather(const ParamGather&) = delete;
  ParamGather& operator=(const ParamGather&) = delete;

  Tensor& shard(int u) { return shards_[size_t(u)]; }  // the persistent owned shard
  void gather(int u);   // starts the all-gather (no-op when gathered or in flight)
  void require(int u);  // waits for it and binds the unit's parameters
  void release(int u);  // frees the gathered buffer and unbinds
  void release_all();

 private:
  const ShardPlan& plan_;
  model::ParameterStore& store_;
  const UnitGroups& groups_;
  std::shared_ptr<CachingAllocator> alloc_;
  GradSyncStats& stats_;
  std::vector<Tensor> shards_, gathered_;
  std::vector<comm::Work> work_;
};

}  // namespace meshtrain::parallel
