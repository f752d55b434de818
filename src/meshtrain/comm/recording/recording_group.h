// The recording backend: a ProcessGroup of one real member standing for a
// group of any size, for running one rank's real step on the meta device
// (docs/planning.md). Every op is written into a CommLedger (group, kind,
// bytes as CommStats counts them, stamped with the step's program action
// and phase) and moves no data. Host buffers (the step's bookkeeping:
// token counts, lengths, flags) get the values of a group whose every
// member holds what this one holds: a reduction returns this rank's input,
// a gather repeats its chunk, an all-to-all hands back what it sends
// itself; meta buffers are left alone. Splits take the size and rank the
// caller states (SplitPlace).
//
// Non-blocking ops finish after `completion_lag` completion tests
// (Work::is_completed), or when waited for: 1 is a network that is never
// behind, kNeverCompletes one that always is, the planner's brackets.
#pragma once

#include <limits>
#include <memory>

#include "meshtrain/comm/comm_plan.h"
#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm {

inline constexpr int kNeverCompletes = std::numeric_limits<int>::max() / 2;

class RecordingGroup final : public ProcessGroup {
 public:
  RecordingGroup(std::string name, SplitPlace place, std::shared_ptr<CommLedger> ledger, int completion_lag);
  int rank() const override { return place_.rank; }
  int size() const override { return place_.size; }
  std::string_view backend() const override { return "record"; }
  using ProcessGroup::split;
  // Refused: a recording group cannot ask its peers for the new group's
  // size; split(color, key, place, name) states it.
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name,
                                      const GroupOptions& options) override;
  void abort(const std::string&) override {}

 protected:
  std::shared_ptr<ProcessGroup> split_placed(int color, int key, SplitPlace place, const std::string& name) override;
  void on_issue(const OpDesc& d) override;
  Work start(OpDesc& d, bool async) override;

 private:
  SplitPlace place_;
  std::shared_ptr<CommLedger> ledger_;
  int lag_;
};

}  // namespace meshtrain::comm
