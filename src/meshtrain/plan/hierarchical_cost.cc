#include "meshtrain/plan/hierarchical_cost.h"

#include "meshtrain/plan/formulas.h"

namespace meshtrain::plan {
namespace {

using comm::OpKind;

double on_link(OpKind kind, int R, double M, const LinkProfile& link, double share = 1) {
  const AlphaBeta& ab = link.for_op(kind);
  return ring_time(kind, R, M, ab.alpha_s, share / ab.bytes_per_s);  // docs/math.md (M.20)
}

}  // namespace

double hierarchical_seconds(OpKind kind, const comm::NodeLayout& L, double M, const HardwareProfile& hw) {
  // l rings of one rank a node, side by side.
  const CrossingLink ring = crossing_link(hw, 1, L.local);
  const double piece = M / L.local, across = on_link(kind, L.nodes, piece, *ring.link, 1.0 / ring.share);
  switch (kind) {
    case OpKind::AllReduce:
      return on_link(OpKind::ReduceScatter, L.local, M, hw.intra) + across +
             on_link(OpKind::AllGather, L.local, M, hw.intra);
    case OpKind::ReduceScatter:
    case OpKind::AllGather: return on_link(kind, L.local, M, hw.intra) + across;
    default: return flat_seconds(kind, L, M, hw);
  }
}

double flat_seconds(OpKind kind, const comm::NodeLayout& L, double M, const HardwareProfile& hw) {
  return on_link(kind, L.nodes * L.local, M, *crossing_link(hw, L.local, L.local).link);
}

bool runs_hierarchical(comm::HierarchicalMode mode, OpKind kind, const comm::NodeLayout& L, double M,
                       const HardwareProfile& hw) {
  if (kind != OpKind::AllReduce && kind != OpKind::ReduceScatter && kind != OpKind::AllGather) return false;
  switch (mode) {
    case comm::HierarchicalMode::Off: return false;
    case comm::HierarchicalMode::On: return true;
    case comm::HierarchicalMode::Auto: return hierarchical_seconds(kind, L, M, hw) < flat_seconds(kind, L, M, hw);
  }
  return false;
}

std::optional<comm::NodeLayout> data_group_layout(const comm::MeshShape& mesh, int rank, const std::string& key,
                                                  int ranks_per_node) {
  if (key.find_first_of("./") != std::string::npos || key == "world") return std::nullopt;
  const comm::Axes axes = comm::Axes::parse(key);
  if (!axes.has(comm::Axis::Dp) && !axes.has(comm::Axis::Edp)) return std::nullopt;
  for (comm::Axis a : {comm::Axis::Pp, comm::Axis::Tp, comm::Axis::Ep})
    if (axes.has(a)) return std::nullopt;
  const std::vector<int> members = mesh.members(rank, axes);
  std::vector<std::string> hosts;
  int position = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    hosts.push_back(std::to_string(members[i] / ranks_per_node));
    if (members[i] == rank) position = int(i);
  }
  return comm::node_layout(hosts, position, nullptr);
}

}  // namespace meshtrain::plan
