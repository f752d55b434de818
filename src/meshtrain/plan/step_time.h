// Predicted step time of a layout on a machine profile. Each rank's
// recorded program (rank_step.h) is walked with a clock: compute actions
// take their segments' time (compute_cost.h) plus the tensor-parallel
// collectives they block on; collectives the engine launches run one after
// another on their group's stream (the backends run a group's non-blocking
// operations in order) at the alpha-beta time of docs/math.md (M.20) for the link the
// group crosses (inside a node, or between nodes), or (M.70) where a
// data-parallel group runs hierarchically across nodes (comm.hierarchical,
// hierarchical_cost.h); a Require waits for its
// gather, the end of the window waits for every reduction (the exposed
// tail of (M.24)). The pipeline's makespan and bubble come from simulating the
// schedule with the slowest stage's F, B and W. The step is
//   makespan + the largest exposed communication of any rank
//   + the update (AdamW over the owned shard) + the publication all-gathers
//   + the step's small collectives (counts, loss, norm, finiteness flag).
#pragma once

#include <array>
#include <span>
#include <string>
#include <vector>

#include "meshtrain/plan/hardware.h"
#include "meshtrain/plan/step_inputs.h"
#include "meshtrain/plan/rank_step.h"

namespace meshtrain::plan {

struct RankTime {
  int rank = 0;
  double compute_s = 0;         // F + B + W of every micro-batch, tensor-parallel collectives included
  double tp_comm_s = 0;         // the part spent in tensor-parallel collectives
  double pp_comm_s = 0;         // pipeline sends, each arriving pp_transfer_s after it leaves (not in compute_s)
  double pp_transfer_s = 0;     // the longest one: the schedule's transfer latency
  double grad_comm_s = 0;       // gradient reductions and ZeRO-3 gathers, overlapped or not
  double exposed_s = 0;         // of those, what the rank waited for
  double optimizer_s = 0;
  double publish_s = 0;
  double bookkeeping_s = 0;
  double chunk_f = 0, chunk_b = 0, chunk_w = 0;  // one micro-batch through the rank's chunk
};

struct StepTime {
  double step_s = 0;
  double makespan_s = 0;       // the schedule's compute span (bubble included)
  double bubble = 0;           // idle fraction of the pipeline
  double exposed_comm_s = 0;   // the largest exposed communication of any rank
  double update_s = 0;         // optimizer + publication + small collectives
  double flops = 0;            // executed per step over all ranks (recomputation included)
  double model_flops = 0;      // 6N + attention per token (model::model_flops_per_token) x tokens
  double mfu = 0;              // model_flops / (step * devices * peak)
  double hfu = 0;              // flops / (step * devices * peak)
  std::vector<RankTime> ranks;
};

// Ranks on each node (docs/planning.md, "Nodes and links"): world / nodes
// with in.nodes; else the profile's node.devices (every rank without a
// profile). ConfigError when
// more ranks than a GPU node's devices would sit on a node.
int ranks_per_node(const StepInputs& in, const HardwareProfile* hw);
// CPU ranks that share a node's cores and memory (node.shared): world /
// nodes with in.nodes, else every rank (one machine).
int ranks_sharing_cores(const StepInputs& in);
// Whether `rank`'s group (a mesh group key or "world") has members on more
// than one node: the mesh's ranks fill the nodes in order (node by node,
// tp innermost, then cp: comm/mesh.h, comm/node_placement.h).
bool crosses_nodes(const StepInputs& in, int rank, const std::string& group, const HardwareProfile* hw);
// The link that prices a collective of `rank`'s group (docs/planning.md,
// "Nodes and links"): [link.intra] inside a node, crossing_link
// (hardware.h) across nodes, with the part of its bandwidth the group's
// stream gets.
struct GroupLink {
  const LinkProfile* link = nullptr;
  bool inter = false;
  double share = 1;
};
GroupLink group_link(const StepInputs& in, int rank, const std::string& group, const HardwareProfile& hw);
// The names of `axes` (comm::kWorldAxes: all) whose rank-0 group spans
// nodes. Of them tp and cp (kLayerAxes) cross the link in every
// layer: allowed only with launch --allow-cross-node-tp.
inline constexpr std::array<comm::Axis, 2> kLayerAxes = {comm::Axis::Tp, comm::Axis::Cp};
std::vector<std::string> axes_across_nodes(const StepInputs& in, const HardwareProfile* hw,
                                           std::span<const comm::Axis> axes);
// Alpha-beta time of one planned collective (docs/math.md (M.20)) on `link`.
double op_seconds(const comm::PlannedOp& op, const LinkProfile& link);

// steps: one per rank class, each with the number of ranks it stands for
// (prediction.h); the step is set by the slowest.
StepTime predict_step_time(const StepInputs& in, const std::vector<RankStep>& steps, const HardwareProfile& hw);

}  // namespace meshtrain::plan
