// Pipeline timelines: when each stage ran each compute action of a window
// (recorded by the executor), the measured bubble, and the measured F, B, W
// times per chunk that feed the costed simulator (schedule.h). The SVG
// drawing is in timeline_svg.h.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/parallel/schedule.h"

namespace meshtrain::parallel {

// One chunk action (its segments merged): seconds on the rank's steady
// clock, or from the window's start once gathered.
struct TimedAction {
  Op op = Op::Forward;
  int micro = 0, chunk = 0;
  double start = 0, end = 0;
  double busy = 0;  // computing (end - start less the parameter waits between its segments)
};

// A wait at a pipeline receive (RecvActivation or RecvGradient of
// micro-batch `micro` for chunk `chunk`), on the rank's steady clock.
struct ReceiveWait {
  Op op = Op::RecvActivation;
  int micro = 0, chunk = 0;
  double start = 0, end = 0;
};

struct PipelineTimeline {
  std::string schedule;
  int micro_batches = 0, virtual_stages = 1;
  std::vector<std::vector<TimedAction>> stages;  // per pipeline rank
  double origin = 0;  // the stages' clock at this timeline's 0 (rebase() moves it)
  // 1 - (time computing) / (stages x (last end - first start)).
  double measured_bubble() const;
  // Median F, B and W seconds of each chunk (a fused BW counts as B with
  // W = 0; a chunk without a measurement gets the median of its kind).
  ChunkCosts chunk_costs(int chunks) const;
  // Shifts every time so the earliest start is 0.
  void rebase();
  // Seconds of `waits` (one stage's, on the stages' clock) after the sending stage had finished the action that
  // produced the message: an activation for chunk c comes from F of chunk
  // c - 1, a gradient from B of chunk c + 1, same micro-batch. The transfer
  // time the stage could not hide; waiting before that is the schedule's
  // dependency, which the bubble counts. A wait whose sender is not in the
  // timeline counts nothing.
  double exposed_transfer(const std::vector<ReceiveWait>& waits) const;
};

// Collective over the pipeline group: every stage's actions (stage =
// rank in `pp`), times from the earliest start. The stages' steady clocks
// must be one clock: threads, or processes on one host.
PipelineTimeline gather_timeline(comm::ProcessGroup& pp, const std::vector<TimedAction>& mine);

}  // namespace meshtrain::parallel
