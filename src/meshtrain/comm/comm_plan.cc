#include "meshtrain/comm/comm_plan.h"

namespace meshtrain::comm {

const char* to_string(StepPhase p) {
  switch (p) {
    case StepPhase::Forward: return "forward";
    case StepPhase::Backward: return "backward";
    case StepPhase::GradSync: return "gradient sync";
    case StepPhase::Optimizer: return "optimizer";
    case StepPhase::Publish: return "publish";
    case StepPhase::Bookkeeping: return "bookkeeping";
  }
  return "?";
}

std::map<std::pair<std::string, OpKind>, PlannedTotals> CommLedger::by_group() const {
  std::map<std::pair<std::string, OpKind>, PlannedTotals> out;
  for (const PlannedOp& op : ops_) {
    PlannedTotals& t = out[{op.group, op.kind}];
    t.calls += 1;
    t.bytes += op.bytes;
  }
  return out;
}

}  // namespace meshtrain::comm
