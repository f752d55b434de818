// The one executor: runs a rank's step program (program.h) for one window.
// Compute actions call the model's segments (forward, input gradient,
// weight gradient), transfers move a micro-batch's activations or their
// gradients between pipeline ranks (non-blocking sends; receives posted one
// compute action ahead, so the data moves while the rank computes; matched
// by (kind, micro-batch, chunk) tags, so a payload can never be paired with
// another micro-batch), and parameter actions drive the data-parallel
// engine. A single device runs the trivial schedule through the same code.
// Every compute action is timed (timeline.h).
#pragma once

#include <functional>
#include <map>

#include "meshtrain/comm/comm_plan.h"
#include "meshtrain/comm/process_group.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/parallel/program.h"
#include "meshtrain/parallel/timeline.h"

namespace meshtrain::parallel {

struct WindowResult {
  double loss_sum = 0;  // over this rank's micro-batches whose head it holds
  int64_t count = 0;    // supervised targets they contain
  std::vector<double> micro_loss;  // loss sum of each micro-batch (its index in the window)
};

class StepExecutor {
 public:
  // pp: the pipeline group (peers are pipeline ranks); null when pp = 1.
  // engine: null when the model owns its parameters and gradients (no
  // data-parallel state: tests, tools). ledger: where a recording context's
  // groups write (comm/recording/recording_group.h), stamped with each
  // action and its phase; null in a real run.
  StepExecutor(model::Transformer& model, DataParallel* engine, comm::ProcessGroup* pp,
               comm::CommLedger* ledger = nullptr);

  // micro(j): micro-batch j of the window (valid until run returns). mode:
  // training (backward + loss coefficient) or forward-only.
  WindowResult run(const Program& program, const std::function<model::TokenBatch(int)>& micro,
                   const model::ForwardMode& mode);
  // The last run's compute actions, one per chunk action, in the order
  // they ran, on this rank's steady clock (seconds).
  const std::vector<TimedAction>& timeline() const { return timeline_; }
  // The last window's waits at pipeline receives (timeline.h).
  const std::vector<ReceiveWait>& receive_waits() const { return receive_waits_; }
  // Most micro-batches with saved state (forward done, backward not) at
  // once during the last run.
  int peak_live_micro_batches() const { return peak_live_; }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, segment)
  struct PostedRecv {
    comm::Work work;
    Tensor buffer;
  };
  int tag(const Action& a, bool gradient) const;
  Tensor recv_buffer(const model::TokenBatch& b);
  void post_recv(const Action& a, size_t index, const std::function<model::TokenBatch(int)>& micro);
  void post_ahead(const Program& program, size_t index, const std::function<model::TokenBatch(int)>& micro);
  void execute(const Action& a, const std::function<model::TokenBatch(int)>& micro, const model::ForwardMode& mode,
               size_t index, WindowResult& result);
  // The head's loss of micro-batch `micro` into the window's sums (after F,
  // or after B for a head in row chunks).
  static void record_loss(int micro, const model::SegmentState& st, WindowResult& result);
  void record(const Action& a, double start, double end);
  void unwind(const std::string& reason);
  void stamp(const Program& program, size_t index);
  int live_micro_batches() const;

  model::Transformer& model_;
  DataParallel* engine_;
  comm::ProcessGroup* pp_;
  comm::CommLedger* ledger_;
  int peak_live_ = 0;
  std::map<Key, model::SegmentState> states_;
  std::map<Key, Tensor> inputs_;        // a segment's input activations
  std::map<Key, Tensor> output_grads_;  // dL/d(a segment's output)
  std::vector<comm::Work> sends_;
  std::vector<Tensor> in_flight_;       // buffers of pending sends
  std::map<size_t, PostedRecv> posted_;  // program index -> its receive, posted ahead
  size_t posted_until_ = 0;              // program indices below this have been looked at
  std::vector<TimedAction> timeline_;
  std::vector<ReceiveWait> receive_waits_;
};

}  // namespace meshtrain::parallel
