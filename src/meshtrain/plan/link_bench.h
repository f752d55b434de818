// Alpha-beta of one link, measured: every collective the planner prices
// (all_reduce, reduce_scatter, all_gather, send) timed over a process group
// at message sizes from min_bytes to max_bytes (x4 apart), and fitted to the
// planner's own formula, docs/math.md (M.20): t = rounds(op, R) alpha +
// wire_bytes(op, R, M) beta (formulas.h). `meshtrain bench machine` runs it
// over the ranks of a node (the intra-node link) and over one rank of each
// node (the inter-node link), every group at the same time, as a training
// step's groups run (docs/planning.md, "Machine profiles").
#pragma once

#include <cstddef>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/plan/hardware.h"

namespace meshtrain::plan {

struct LinkSample {
  comm::OpKind op = comm::OpKind::AllReduce;
  size_t bytes = 0;     // M as the planner's ledger counts it (all-reduce buffer, RS input, AG output, a send)
  double seconds = 0;   // median over repetitions of the group's slowest member
};

struct LinkBenchOptions {
  size_t min_bytes = 256, max_bytes = size_t(16) << 20;
  int iters = 5;                  // repetitions per size at least, after one warm-up
  size_t bytes_per_size = size_t(8) << 20;  // smaller sizes repeat until about this much has moved (at most 20 times)
};

// The ops the planner prices per link, in the order of the profile's keys.
const std::vector<comm::OpKind>& priced_ops();

// Collective over `start` (a group holding `group`, such as the world):
// every member of `group` times every op and size; each repetition begins
// at a barrier of `start`, so that the groups measured side by side run
// at once, and counts the slowest member of `group` (an all-reduce of the
// times). send: every member sends M to the next member and receives M
// from the previous one at once (a pipeline's exchange).
std::vector<LinkSample> time_link(comm::ProcessGroup& group, comm::ProcessGroup& start,
                                  const LinkBenchOptions& options);

// alpha and beta of `op` over R ranks: the line t = rounds alpha + wire
// beta (wire: the bytes each rank sends) through the fastest of the three
// smallest messages, with the least squares
// slope of the others, which the largest messages decide (a link's
// sustained rate, not a burst a shaper lets through); alpha at least
// 0.1 us. Where noise hides the slope, the largest message's bytes over
// its time.
AlphaBeta fit_link(comm::OpKind op, int R, const std::vector<LinkSample>& samples);

}  // namespace meshtrain::plan
