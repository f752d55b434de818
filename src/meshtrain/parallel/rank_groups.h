// The groups one rank's step uses, resolved once from its layout plan on
// the mesh: every part of the step (the model's regions, the ring, the
// expert exchange, the executor, the data-parallel engine, the trainer's
// counts) takes its groups from here and never names an axis itself. A
// group of one rank is null where a part must know it has no peers (tp, pp,
// cp, ep); the data and model groups always exist (a group of one reduces
// nothing: one code path).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "meshtrain/comm/mesh.h"
#include "meshtrain/parallel/layout_plan.h"

namespace meshtrain::parallel {

struct RankGroups {
  comm::ProcessGroup* world = nullptr;
  // The data-parallel groups, in the form DataGroupForm gives them.
  comm::ProcessGroup* dp = nullptr;     // replicas: each takes its own rows of the window
  comm::ProcessGroup* data = nullptr;   // the plan's data axes: loss, gradients and ZeRO shards
  comm::ProcessGroup* model = nullptr;  // the plan's model axes (pp x tp): the norm's blocks
  comm::ProcessGroup* tp = nullptr;
  comm::ProcessGroup* pp = nullptr;
  comm::ProcessGroup* cp = nullptr;
  comm::ProcessGroup* ep = nullptr;
  comm::ProcessGroup* edp = nullptr;           // replicas of this rank's experts (the data group without ep)
  comm::ProcessGroup* expert_model = nullptr;  // every holder of some expert: model x ep (the model group without ep)
  // The pipeline ranks holding a tied weight's copies (the plan's
  // tie_stages()), null where this rank holds none.
  std::shared_ptr<comm::ProcessGroup> tie;
  // The consecutive tp ranks sharing this rank's KV head (KV heads fewer
  // than tp ranks: the plan's tp_replicas of k_proj and v_proj; the tp
  // group itself for one head), null where heads are not shared.
  comm::ProcessGroup* kv_share = nullptr;
  std::vector<std::shared_ptr<comm::ProcessGroup>> owned;  // the splits made here
};

// The form the data-parallel groups (dp, data, edp) run in, given one of
// them and its members' world ranks: the group itself, or a hierarchical
// composition over it where it spans nodes (comm/hierarchical_group.h;
// train/hierarchy.h decides). Collective over the group.
using DataGroupForm = std::function<std::shared_ptr<comm::ProcessGroup>(
    const std::shared_ptr<comm::ProcessGroup>& group, const std::vector<int>& world_members)>;

// Collective over the mesh's pp and tp groups (the tie and share splits, in
// the same order on every rank) and, with a `form`, over the data-parallel
// groups (dp, then data, then edp).
RankGroups resolve_groups(const LayoutPlan& plan, const comm::Mesh& mesh, const DataGroupForm& form = {});

}  // namespace meshtrain::parallel
