// The hierarchical form of a data-parallel collective priced next to the
// flat one (docs/math.md (M.70)), and comm.hierarchical's choice between
// them: in the step time (step_time.cc) and, given a machine profile, in
// the trainer, per collective (train/hierarchy.h). One formula for both.
#pragma once

#include <optional>
#include <string>

#include "meshtrain/comm/hierarchical_group.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/plan/hardware.h"

namespace meshtrain::plan {

// (M.70) over n nodes x l ranks for M logical bytes:
//   all-reduce:     t_RS(l, M; intra) + t_AR(n, M/l; inter) + t_AG(l, M; intra)
//   reduce-scatter: t_RS(l, M; intra) + t_RS(n, M/l; inter)
//   all-gather:     t_AG(n, M/l; inter) + t_AG(l, M; intra)
// each term (M.20) on its link. The l inter-node rings run at once: on a
// shared node (node.shared, CPU ranks) they share the node's one link, so
// its beta counts l times; devices with a link each (GPU nodes) do not
// (crossing_link, hardware.h, as the step time prices any group across nodes).
double hierarchical_seconds(comm::OpKind kind, const comm::NodeLayout& layout, double M, const HardwareProfile& hw);
// (M.20) of the flat op over n·l ranks on the inter-node link
// ([link.inter.whole_nodes] where the profile has it), as the step time
// prices a group of whole nodes.
double flat_seconds(comm::OpKind kind, const comm::NodeLayout& layout, double M, const HardwareProfile& hw);
// Whether `mode` runs the op hierarchically: on (every all-reduce,
// reduce-scatter and all-gather), off (none), auto (where (M.70) is below
// the flat time).
bool runs_hierarchical(comm::HierarchicalMode mode, comm::OpKind kind, const comm::NodeLayout& layout, double M,
                       const HardwareProfile& hw);

// The node layout of `rank`'s group `key` (a mesh group key) when it is a
// data-parallel group (its axes among dp, cp, edp) spanning nodes of
// `ranks_per_node` ranks each, numbered node by node (step_time.h), as
// comm::node_layout accepts; empty otherwise.
std::optional<comm::NodeLayout> data_group_layout(const comm::MeshShape& mesh, int rank, const std::string& key,
                                                  int ranks_per_node);

}  // namespace meshtrain::plan
