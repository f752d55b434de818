// Which node (host) each rank runs on, and the mesh order that follows from
// it (docs/multi-node.md): tp is the innermost mesh axis and cp the next
// (mesh.h), so numbering the mesh's ranks node by node puts every tp and cp
// group inside one node, where its per-layer collectives run over shared
// memory, and dp and pp across nodes, over the network. A tp or cp group
// that cannot stay inside a node is refused unless the user allows it.
// One code path: a job on one host (every threads-backend job) has one node,
// the identity order and nothing to refuse.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/comm/mesh.h"
#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm {

// The host name of every rank of `world`, by rank (collective):
// gethostname(), or the names MESHTRAIN_HOST_OF_RANK lists by rank
// ("node0,node0,node1,node1": one machine standing for several nodes, for
// tests; docs/multi-node.md).
std::vector<std::string> gather_host_names(ProcessGroup& world);

// The ranks in node-major order: the nodes in the order of their first
// rank, each node's ranks ascending. order[i] is the rank that becomes
// mesh rank i; the identity when every node's ranks are contiguous (how
// mpirun maps a hostfile by slot, its default).
std::vector<int> node_major_order(const std::vector<std::string>& host_of_rank);

// "2 nodes: node0 ranks 0-1, node1 ranks 2-3" for ranks in node-major
// order; "" for one node.
std::string describe_nodes(const std::vector<std::string>& host_of_rank);

// ConfigError when a tp group, or a cp x tp group, of `shape` holds ranks
// of more than one node (host_of_rank by mesh rank), naming the group, its
// nodes and what to change; nothing when `allow_cross_node` is set.
void check_groups_inside_nodes(const MeshShape& shape, const std::vector<std::string>& host_of_rank,
                               bool allow_cross_node);

}  // namespace meshtrain::comm
