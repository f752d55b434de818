#include "meshtrain/parallel/executor.h"

#include <chrono>

#include "meshtrain/core/rank_activity.h"

namespace meshtrain::parallel {

namespace {

// Where the rank is, for its heartbeat (core/rank_activity.h).
const char* activity_phase(Op op) {
  return op == Op::Forward ? "forward" : op == Op::BackwardWeight ? "weight gradient" : "backward";
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string current_reason() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

}  // namespace

StepExecutor::StepExecutor(model::Transformer& model, DataParallel* engine, comm::ProcessGroup* pp,
                           comm::CommLedger* ledger)
    : model_(model), engine_(engine), pp_(pp), ledger_(ledger) {}

int StepExecutor::tag(const Action& a, bool gradient) const {
  // One tag per (kind, micro-batch, chunk) of the window, counted densely
  // and wrapped inside the group's tag bound (MPI guarantees 32767): a tag
  // comes round again only after thousands of transfers, while the
  // messages in flight between two stages at once span a few micro-batches.
  const int64_t chunks = model_.config().n_layers + 2;  // more than any rank's chunk count
  const int64_t dense = (int64_t(a.micro) * chunks + a.chunk) * 2 + (gradient ? 1 : 0);
  return int(dense % (int64_t(pp_->max_tag()) + 1));
}

Tensor StepExecutor::recv_buffer(const model::TokenBatch& b) {
  return Tensor::empty(Shape{model_.stream_rows(b.n()), model_.config().d_model}, model_.params().precision().accumulate(),
                       model_.allocator(), MemCategory::Activations);
}

void StepExecutor::post_recv(const Action& a, size_t index, const std::function<model::TokenBatch(int)>& micro) {
  const bool grad = a.op == Op::RecvGradient;
  Tensor t = recv_buffer(micro(a.micro));
  // Tags name the sender's chunk.
  Action sender = a;
  sender.chunk = peer_chunk(a.op, a.chunk);
  comm::Work w = pp_->irecv(t.raw(), size_t(t.numel()), t.dtype(), a.peer, {.tag = tag(sender, grad)});
  posted_[index] = {std::move(w), std::move(t)};
}

void StepExecutor::post_ahead(const Program& program, size_t index,
                              const std::function<model::TokenBatch(int)>& micro) {
  // The receives the next compute action needs sit right before it.
  size_t next = index + 1;
  while (next < program.actions.size() && !is_compute(program.actions[next].op)) ++next;
  for (size_t k = std::max(posted_until_, index + 1); k < next; ++k) {
    const Op op = program.actions[k].op;
    if (op != Op::RecvActivation && op != Op::RecvGradient) continue;
    if (ledger_) stamp(program, k);  // the receive is its own action's, though posted now
    post_recv(program.actions[k], k, micro);
  }
  if (ledger_) stamp(program, index);
  posted_until_ = std::max(posted_until_, next);
}

void StepExecutor::record(const Action& a, double start, double end) {
  // Segments of one chunk action run back to back: one span.
  if (!timeline_.empty()) {
    TimedAction& last = timeline_.back();
    if (last.op == a.op && last.micro == a.micro && last.chunk == a.chunk) {
      last.end = end;
      last.busy += end - start;
      return;
    }
  }
  timeline_.push_back({a.op, a.micro, a.chunk, start, end, end - start});
}

WindowResult StepExecutor::run(const Program& program, const std::function<model::TokenBatch(int)>& micro,
                               const model::ForwardMode& mode) {
  MT_CHECK(program.trains == mode.backward, "a ", program.trains ? "training" : "forward-only",
           " program run in the other mode");
  WindowResult result;
  timeline_.clear();
  receive_waits_.clear();
  posted_until_ = 0;
  try {
    peak_live_ = 0;
    for (size_t i = 0; i < program.actions.size(); ++i) {
      const Action& a = program.actions[i];
      if (ledger_) stamp(program, i);
      if (!is_compute(a.op)) {
        const double t0 = now_s();
        execute(a, micro, mode, i, result);
        if (a.op == Op::RecvActivation || a.op == Op::RecvGradient)
          receive_waits_.push_back({a.op, a.micro, a.chunk, t0, now_s()});
        continue;
      }
      if (pp_) post_ahead(program, i, micro);
      activity::mark(activity_phase(a.op));
      const double t0 = now_s();
      execute(a, micro, mode, i, result);
      record(a, t0, now_s());
      peak_live_ = std::max(peak_live_, live_micro_batches());
    }
    for (auto& w : sends_) w.wait();
    if (ledger_) ledger_->set_position(-1, comm::StepPhase::Bookkeeping);
  } catch (...) {
    unwind(current_reason());
    throw;
  }
  sends_.clear();
  in_flight_.clear();
  MT_CHECK(states_.empty() && inputs_.empty() && output_grads_.empty() && posted_.empty(),
           "the step program left state behind: a missing backward or transfer");
  return result;
}

int StepExecutor::live_micro_batches() const {
  int n = 0, last = -1;
  for (const auto& [key, state] : states_)  // ordered by micro-batch
    if (key.first != last) ++n, last = key.first;
  return n;
}

void StepExecutor::stamp(const Program& program, size_t index) {
  auto phase_of = [](Op op) {
    switch (op) {
      case Op::Forward:
      case Op::SendActivation:
      case Op::RecvActivation: return comm::StepPhase::Forward;
      case Op::ReduceGrads:
      case Op::CloseLeaf: return comm::StepPhase::GradSync;
      default: return comm::StepPhase::Backward;
    }
  };
  // A parameter gather belongs to the pass of the compute action it is for.
  size_t i = index;
  auto is_param = [](Op op) { return op == Op::Gather || op == Op::Require || op == Op::Release; };
  if (is_param(program.actions[index].op))
    while (i < program.actions.size() && !is_compute(program.actions[i].op)) ++i;
  ledger_->set_position(int(index), i < program.actions.size() ? phase_of(program.actions[i].op)
                                                                : comm::StepPhase::Forward);
}

void StepExecutor::unwind(const std::string& reason) {
  // A receive posted ahead writes into its buffer whenever its send comes:
  // abort the group (the peers wake with this error) before freeing it.
  bool pending = false;
  for (auto& [k, p] : posted_) pending = pending || !p.work.is_completed();
  if (pending) pp_->abort(reason);
  for (auto& [k, p] : posted_)
    try { p.work.wait(); } catch (...) {}
  posted_.clear();
  // Never free a buffer a pending send still reads.
  for (auto& w : sends_)
    if (w.valid()) try { w.wait(); } catch (...) {}
  sends_.clear();
  in_flight_.clear();
  states_.clear();
  inputs_.clear();
  output_grads_.clear();
}

void StepExecutor::record_loss(int micro, const model::SegmentState& st, WindowResult& result) {
  result.loss_sum += st.loss.loss_sum;
  result.count += st.loss.count;
  if (result.micro_loss.size() <= size_t(micro)) result.micro_loss.resize(size_t(micro) + 1, 0.0);
  result.micro_loss[size_t(micro)] = st.loss.loss_sum;
}

void StepExecutor::execute(const Action& a, const std::function<model::TokenBatch(int)>& micro,
                           const model::ForwardMode& mode, size_t index, WindowResult& result) {
  const int last = model_.num_segments() - 1;
  const Key key{a.micro, a.segment};
  switch (a.op) {
    case Op::Forward: {
      const model::TokenBatch b = micro(a.micro);
      model::SegmentState& st = states_[key];
      Tensor x;
      if (a.segment > 0) {
        x = inputs_.at(key);
        inputs_.erase(key);
      }
      Tensor y = model_.forward_segment(a.segment, b, x, st, mode);
      if (a.segment == last) {
        if (!st.loss_in_backward) record_loss(a.micro, st, result);
      } else if (!mode.logits) {
        inputs_[{a.micro, a.segment + 1}] = std::move(y);
      }
      if (!mode.backward) states_.erase(key);
      break;
    }
    case Op::Backward:
    case Op::BackwardInput: {
      const model::TokenBatch b = micro(a.micro);
      if (engine_)
        for (int u : model_.segment_units(a.segment)) engine_->prepare_grads(u);
      Tensor dy;
      if (a.segment < last) {
        dy = output_grads_.at(key);
        output_grads_.erase(key);
      }
      model::SegmentState& st = states_.at(key);
      Tensor dx = model_.backward_segment_input(a.segment, b, dy, st, a.op == Op::BackwardInput);
      if (a.segment == last && st.loss_in_backward) record_loss(a.micro, st, result);  // a head in row chunks
      if (a.segment > 0) output_grads_[{a.micro, a.segment - 1}] = std::move(dx);
      if (a.op == Op::Backward) states_.erase(key);
      break;
    }
    case Op::BackwardWeight:
      model_.backward_segment_weight(a.segment, states_.at(key));
      states_.erase(key);
      break;
    case Op::SendActivation:
    case Op::SendGradient: {
      const bool grad = a.op == Op::SendGradient;
      auto& table = grad ? output_grads_ : inputs_;
      // The payload: the input of the next chunk's first segment, or the
      // gradient of the previous chunk's last segment's output.
      const Key k = grad ? Key{a.micro, a.segment} : Key{a.micro, a.segment + 1};
      Tensor t = table.at(k);
      table.erase(k);
      sends_.push_back(pp_->isend(t.raw(), size_t(t.numel()), t.dtype(), a.peer, {.tag = tag(a, grad)}));
      in_flight_.push_back(std::move(t));
      break;
    }
    case Op::RecvActivation:
    case Op::RecvGradient: {
      const bool grad = a.op == Op::RecvGradient;
      if (!posted_.count(index)) post_recv(a, index, micro);
      auto it = posted_.find(index);
      it->second.work.wait();  // on failure the entry stays for unwind()
      (grad ? output_grads_ : inputs_)[grad ? key : Key{a.micro, a.segment + 1}] = std::move(it->second.buffer);
      posted_.erase(it);
      break;
    }
    // Without an engine the model owns whole parameters and gradients.
    case Op::Gather: if (engine_) engine_->gather(a.unit); break;
    case Op::Require: if (engine_) engine_->require_params(a.unit); break;
    case Op::Release: if (engine_) engine_->release(a.unit); break;
    case Op::ReduceGrads: if (engine_) engine_->reduce_grads(a.unit); break;
    case Op::CloseLeaf: if (engine_) engine_->close_leaf(a.unit); break;
  }
}

}  // namespace meshtrain::parallel
