#include "meshtrain/plan/step_replay.h"

#include <map>

#include "meshtrain/model/memory_trace.h"
#include "meshtrain/parallel/schedule_gen.h"

namespace meshtrain::plan {

namespace {

// Timeline entries a rank records (executor.cc record): one per compute
// action, consecutive segments of one chunk action merged.
int64_t timeline_entries(const parallel::Program& program) {
  int64_t n = 0;
  const parallel::Action* last = nullptr;
  for (const parallel::Action& a : program.actions) {
    if (!parallel::is_compute(a.op)) continue;
    if (!last || last->op != a.op || last->micro != a.micro || last->chunk != a.chunk) ++n;
    last = &a;
  }
  return n;
}

}  // namespace

// What the step's gathers over the model-parallel ranks size their buffers
// by: the longest norm block list of this rank's pp x tp group and the
// longest pipeline timeline of its stages.
ModelGroupLists model_group_lists(const StepInputs& in, int rank, bool schedule_validated) {
  ModelGroupLists out;
  std::map<std::string, int> c = in.mesh.coords(rank);
  for (int p = 0; p < in.mesh.pp; ++p)
    for (int t = 0; t < in.mesh.tp; ++t) {
      c["pp"] = p;
      c["tp"] = t;
      const parallel::LayoutPlan plan(in.model, in.mesh, in.mesh.rank_of(c), in.layout);
      out.norm_blocks = std::max(out.norm_blocks, norm_blocks(plan.shards(), in.mesh.dp));
      if (t == 0 && in.mesh.pp > 1)
        out.timeline_entries =
            std::max(out.timeline_entries, timeline_entries(train_program(plan, in, schedule_validated)));
    }
  return out;
}

parallel::Program train_program(const parallel::LayoutPlan& plan, const StepInputs& in, bool validated) {
  const parallel::ParamPolicy policy{plan.shards().shards_params(), in.parallel.reshard_after_forward,
                                     in.parallel.overlap, in.parallel.reproducible};
  return parallel::expand(train_schedule(in), plan.coord("pp"), plan.chunks(),
                          [&](int s) { return plan.spec().segment_units(s); }, policy, validated);
}

parallel::Schedule train_schedule(const StepInputs& in) {
  return parallel::make_schedule(in.schedule, in.mesh.pp, int(in.grad_accum), in.layout.virtual_stages);
}

StepReplay replay_step(const StepInputs& in, int rank, int completion_lag, bool schedule_validated,
                       const ModelGroupLists* lists_given) {
  in.validate();
  StepReplay out;
  out.rank = rank;
  out.plan = std::make_shared<const parallel::LayoutPlan>(in.model, in.mesh, rank, in.layout);
  const parallel::LayoutPlan& plan = *out.plan;
  const model::ModelConfig& cfg = plan.model_config();
  model::ExecOptions exec;
  exec.recompute = in.recompute;
  exec.materialize_params = false;
  exec.precision = in.precision;
  exec.fuse_residual = in.fuse_residual;
  exec.sequence_parallel = in.layout.sequence_parallel;
  // transformer.cc refuses the same layout before anything is allocated.
  const model::ModelPartition& part = plan.partition();
  MT_REQUIRE(ConfigError, !cfg.tied_embeddings || !part.holds(int(cfg.n_layers) + 1) || part.holds(0),
             "model.tied_embeddings = true with the head and the embedding on different pipeline stages: the tied "
             "weight would need a copy on the last stage whose gradient is summed with the first's, which this "
             "layout does not place");
  const model::ModelMemoryTrace model(cfg, plan.spec(), exec, in.mesh.tp);
  out.program = train_program(plan, in, schedule_validated);
  const parallel::Program& program = out.program;
  MemoryReplay r;
  EngineReplay engine(r, out.comm, plan, in.parallel, in.precision, completion_lag);
  out.at_rest = r.tracker().snapshot();
  r.tracker().reset_peaks();
  engine.begin_window();

  const int dp = in.mesh.dp, pp = in.mesh.pp;
  auto add = [&](const std::string& g, int size, comm::OpKind k, int64_t bytes, comm::StepPhase ph, const char* w) {
    out.comm.add({g, size, k, bytes, ph, w});
  };
  // trainer.cc step 1: the window's three token counts over dp.
  add("dp", dp, comm::OpKind::AllReduce, 3 * 8, comm::StepPhase::Bookkeeping, "token counts (29.2)");

  // executor.cc run(): the rank's program.
  const model::TraceBatch b{in.micro_batch, in.seq_len};
  const int last = model.num_segments() - 1;
  const int64_t act_elems = model.stream_rows(b.n()) * cfg.d_model;  // the stage's rows of the stream
  const DType act_dtype = in.precision.accumulate();
  using Key = std::pair<int, int>;
  std::map<Key, model::SegmentTrace> states;
  std::map<Key, SymTensor> inputs, output_grads;
  std::vector<SymTensor> in_flight;  // sent tensors live until the window's sends are waited for
  std::map<int, int> live;           // micro-batch -> segments with forward done and state held
  // The pass of the next compute action at each position (gathers prefetch for it).
  std::vector<comm::StepPhase> next_pass(program.actions.size() + 1, comm::StepPhase::Forward);
  for (size_t i = program.actions.size(); i-- > 0;) {
    const parallel::Op op = program.actions[i].op;
    next_pass[i] = !parallel::is_compute(op) ? next_pass[i + 1]
                   : op == parallel::Op::Forward ? comm::StepPhase::Forward
                                                 : comm::StepPhase::Backward;
  }
  // executor.cc post_ahead: before a compute action runs, the receives up
  // to the next compute action are posted, their buffers allocated.
  std::map<size_t, SymTensor> posted;
  size_t posted_until = 0;
  auto post_ahead = [&](size_t i) {
    size_t next = i + 1;
    while (next < program.actions.size() && !parallel::is_compute(program.actions[next].op)) ++next;
    for (size_t k = std::max(posted_until, i + 1); k < next; ++k) {
      const parallel::Op op = program.actions[k].op;
      if (op == parallel::Op::RecvActivation || op == parallel::Op::RecvGradient)
        posted[k] = r.alloc(act_elems, act_dtype, MemCategory::Activations);
    }
    posted_until = std::max(posted_until, next);
  };
  for (size_t i = 0; i < program.actions.size(); ++i) {
    const parallel::Action& a = program.actions[i];
    out.comm.set_action(int(i));
    engine.set_gather_phase(next_pass[i]);
    if (pp > 1 && parallel::is_compute(a.op)) post_ahead(i);
    const Key key{a.micro, a.segment};
    switch (a.op) {
      case parallel::Op::Forward: {
        SymTensor x;
        if (a.segment > 0) {
          x = inputs.at(key);
          inputs.erase(key);
        }
        SymTensor y = model.forward(r, &out.comm, a.segment, b, x, states[key], true);
        if (a.segment != last) inputs[{a.micro, a.segment + 1}] = std::move(y);
        ++live[a.micro];
        int held = 0;
        for (const auto& [mb, n] : live) held += n > 0;
        out.live_micro_batches = std::max(out.live_micro_batches, held);
        break;
      }
      case parallel::Op::Backward:
      case parallel::Op::BackwardInput: {
        engine.on_backward_action();
        for (int u : plan.spec().segment_units(a.segment)) engine.prepare_grads(u);
        SymTensor dy;
        if (a.segment < last) {
          dy = output_grads.at(key);
          output_grads.erase(key);
        }
        SymTensor dx = model.backward_input(r, &out.comm, a.segment, b, dy, states.at(key),
                                            a.op == parallel::Op::BackwardInput);
        if (a.segment > 0) output_grads[{a.micro, a.segment - 1}] = std::move(dx);
        if (a.op == parallel::Op::Backward) {
          states.erase(key);
          --live[a.micro];
        }
        break;
      }
      case parallel::Op::BackwardWeight:
        model.backward_weight(states.at(key));
        states.erase(key);
        --live[a.micro];
        break;
      case parallel::Op::SendActivation:
      case parallel::Op::SendGradient: {
        const bool grad = a.op == parallel::Op::SendGradient;
        auto& table = grad ? output_grads : inputs;
        const Key k = grad ? key : Key{a.micro, a.segment + 1};
        in_flight.push_back(table.at(k));
        table.erase(k);
        add("pp", pp, comm::OpKind::Send, act_elems * int64_t(dtype_size(act_dtype)),
            grad ? comm::StepPhase::Backward : comm::StepPhase::Forward,
            grad ? "activation gradient to the previous stage" : "activation to the next stage");
        break;
      }
      case parallel::Op::RecvActivation:
      case parallel::Op::RecvGradient: {
        const bool grad = a.op == parallel::Op::RecvGradient;
        auto it = posted.find(i);
        SymTensor buffer = it != posted.end() ? it->second : r.alloc(act_elems, act_dtype, MemCategory::Activations);
        if (it != posted.end()) posted.erase(it);
        (grad ? output_grads : inputs)[grad ? key : Key{a.micro, a.segment + 1}] = std::move(buffer);
        add("pp", pp, comm::OpKind::Recv, act_elems * int64_t(dtype_size(act_dtype)),
            grad ? comm::StepPhase::Backward : comm::StepPhase::Forward,
            grad ? "activation gradient from the next stage" : "activation from the previous stage");
        break;
      }
      case parallel::Op::Gather: engine.gather(a.unit); break;
      case parallel::Op::Require: engine.require(a.unit); break;
      case parallel::Op::Release: engine.release(a.unit); break;
      case parallel::Op::ReduceGrads: engine.reduce_grads(a.unit); break;
      case parallel::Op::CloseLeaf: engine.close_leaf(a.unit); break;
    }
  }
  in_flight.clear();
  out.comm.set_action(-1);
  // trainer.cc steps 3-5: the reduction tail, the loss, the norm, the joint
  // finiteness decision, the update and the publication of parameters.
  engine.finish_grads();
  if (in.parallel.reproducible)  // the micro-batches' losses gathered and summed in the gradients' tree
    add("dp", dp, comm::OpKind::AllGather, in.grad_accum * dp * 8, comm::StepPhase::Bookkeeping, "loss sums");
  else
    add("dp", dp, comm::OpKind::AllReduce, 8, comm::StepPhase::Bookkeeping, "loss sum");
  if (pp > 1) add("pp", pp, comm::OpKind::AllReduce, 8, comm::StepPhase::Bookkeeping, "loss sum over stages");
  const ModelGroupLists lists = lists_given ? *lists_given : model_group_lists(in, rank, schedule_validated);
  engine.grad_norm(lists.norm_blocks);
  add("world", in.world(), comm::OpKind::AllReduce, 4, comm::StepPhase::Bookkeeping, "non-finite flag (Max)");
  engine.publish();
  if (pp > 1) {  // trainer.cc record_pipeline: every stage's timeline (timeline.cc gather_timeline)
    add("pp", pp, comm::OpKind::AllGather, int64_t(pp) * 8, comm::StepPhase::Bookkeeping, "timeline lengths");
    add("pp", pp, comm::OpKind::AllGather, int64_t(pp) * lists.timeline_entries * 6 * 8,
        comm::StepPhase::Bookkeeping, "timelines of the stages");
  }
  out.peak = r.tracker().snapshot();
  return out;
}

}  // namespace meshtrain::plan
