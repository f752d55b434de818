// The group each parameter unit's gradient is summed over and its ZeRO
// state sharded over (shard_plan.h): the data group (dp x cp) for dense
// units; for routed experts' units the expert-data-parallel group, the
// ranks holding the same experts (docs/math.md, "Rule: where experts
// live": expert units are reduced and ZeRO-sharded over it). Without
// expert parallelism both are the data group: one code path.
#pragma once

#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/error.h"
#include "meshtrain/parallel/shard_plan.h"

namespace meshtrain::parallel {

class UnitGroups {
 public:
  // edp: the expert-data-parallel group (null: the data group).
  UnitGroups(const ShardPlan& plan, comm::ProcessGroup& data, comm::ProcessGroup* edp = nullptr)
      : plan_(plan), data_(data), edp_(edp ? edp : &data) {
    for (int u = 0; u < plan.num_units(); ++u)
      MT_CHECK(of(u).size() == plan.unit(u).group_size && of(u).rank() == plan.unit(u).group_rank, "unit ", u,
               "'s group has rank ", of(u).rank(), " of ", of(u).size(), " but the shard plan says ",
               plan.unit(u).group_rank, " of ", plan.unit(u).group_size);
  }
  comm::ProcessGroup& of(int u) const { return plan_.unit(u).experts ? *edp_ : data_; }
  comm::ProcessGroup& data() const { return data_; }
  comm::ProcessGroup& experts() const { return *edp_; }

 private:
  const ShardPlan& plan_;
  comm::ProcessGroup& data_;
  comm::ProcessGroup* edp_;
};

}  // namespace meshtrain::parallel
