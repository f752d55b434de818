// Planned communication: what a step will send, written down before it
// runs. Each entry is one call as CommStats will record it (the group it
// runs on, the op kind, the logical message size M of docs/math.md (M.19)) plus the
// part of the step it belongs to, so a planner can print bytes per
// collective, axis and phase and price them with the alpha-beta model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

enum class StepPhase : uint8_t { Forward, Backward, GradSync, Optimizer, Publish, Bookkeeping };
const char* to_string(StepPhase p);

struct PlannedOp {
  std::string group;   // mesh group key: "dp", "tp", "pp", "pp+tp", ... or "world"
  int group_size = 1;
  OpKind kind = OpKind::AllReduce;
  int64_t bytes = 0;   // M as CommStats counts it (comm_stats.h)
  StepPhase phase = StepPhase::Forward;
  std::string what;    // "bucket 2", "unit 3 reduce-scatter", "tp: attention output"
  int action = -1;     // index of the program action that issues it (-1: outside the program)
};

struct PlannedTotals {
  int64_t calls = 0, bytes = 0;
};

class CommLedger {
 public:
  // Stamps the op with the current program action (set_action).
  void add(PlannedOp op) {
    op.action = action_;
    ops_.push_back(std::move(op));
  }
  // An op as a recording group issues it: stamped with the current action
  // and phase.
  void record(const std::string& group, int group_size, OpKind kind, int64_t bytes) {
    ops_.push_back({group, group_size, kind, bytes, phase_, "", action_});
  }
  void set_action(int index) { action_ = index; }
  // Where the step is: a program action (index >= 0) and its phase, or the
  // step's own work outside the program (-1).
  void set_position(int action, StepPhase phase) {
    action_ = action;
    phase_ = phase;
  }
  const std::vector<PlannedOp>& ops() const { return ops_; }
  // Calls and bytes per (group, op kind): what each group's CommStats holds
  // after the step.
  std::map<std::pair<std::string, OpKind>, PlannedTotals> by_group() const;

 private:
  std::vector<PlannedOp> ops_;
  int action_ = -1;
  StepPhase phase_ = StepPhase::Bookkeeping;
};

}  // namespace meshtrain::comm
