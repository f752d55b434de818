#include "meshtrain/train/training_step.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "meshtrain/core/rank_activity.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/model/tree_reduce.h"
#include "meshtrain/train/cp_config.h"
#include "meshtrain/train/hierarchy.h"

namespace meshtrain::train {

namespace {

using Clock = std::chrono::steady_clock;

// MESHTRAIN_POISON_STALE_GRADS=1: the debugging aid of ExecOptions (the
// test suite runs with it; docs/errors.md).
bool poison_stale_grads_requested() {
  static const bool on = [] {
    const char* v = std::getenv("MESHTRAIN_POISON_STALE_GRADS");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

}  // namespace

parallel::LayoutOptions layout_options(const TrainConfig& cfg) {
  parallel::LayoutOptions o;
  o.zero_stage = cfg.parallel.zero_stage;
  o.sequence_parallel = cfg.parallel.sequence_parallel;
  o.canonical_blocks = cfg.training.canonical_blocks();
  parallel::set_pipeline_options(o, cfg.parallel, cfg.model, micro_batch_shape(cfg));
  return o;
}

parallel::MicroBatchShape micro_batch_shape(const TrainConfig& cfg) {
  return {cfg.training.micro_batch, cfg.data.seq_len, cfg.training.recompute, cfg.precision().compute};
}

TrainConfig runnable(TrainConfig cfg) {
  cfg.validate();
  cfg.parallel.reproducible = cfg.training.reproducible;
  return cfg;
}

namespace {
// The config as rank `rank` runs it: training.grad_accum is its replica's
// count (uneven data parallelism, docs/math.md (M.75)).
TrainConfig replica_view(const TrainConfig& cfg, const comm::ParallelContext& ctx) {
  TrainConfig c = runnable(cfg);
  c.training.grad_accum = parallel::replica_micro_batches(c.parallel, ctx.mesh.coord(comm::Axis::Dp),
                                                         c.training.grad_accum);
  return c;
}
}  // namespace

TrainingStep::TrainingStep(const TrainConfig& cfg, comm::ParallelContext& ctx)
    : cfg_(replica_view(cfg, ctx)),
      ctx_(ctx),
      layout_(std::make_unique<parallel::LayoutPlan>(cfg_.model, ctx.mesh.shape(), ctx.rank, layout_options(cfg_))),
      groups_(parallel::resolve_groups(*layout_, ctx.mesh, data_group_form(cfg_, ctx, &hierarchy_note_))),
      shard_(ctx.mesh.shape().cp, layout_->coord(comm::Axis::Cp), cfg_.training.canonical_blocks()) {
  check_layout();
  model::ExecOptions exec;
  exec.recompute = cfg_.training.recompute;
  exec.head_chunk_rows = cfg_.training.head_chunk_rows;
  exec.overlap_tp = cfg_.parallel.tp_overlap;
  exec.materialize_params = false;
  exec.precision = cfg_.precision();
  exec.poison_stale_grads = poison_stale_grads_requested();
  model_ = std::make_unique<model::Transformer>(cfg_.model, ctx_.allocator, exec, layout_->spec(), groups_.tp,
                                                groups_.cp, groups_.ep, groups_.kv_share);
  engine_ = std::make_unique<parallel::DataParallel>(*model_, *layout_, groups_, cfg_.parallel, cfg_.optimizer,
                                                     ctx_.allocator);
  executor_ = std::make_unique<parallel::StepExecutor>(*model_, engine_.get(), groups_.pp, ctx_.ledger.get());
  build_programs();
  flops_per_token_ = model::model_flops_per_token(cfg_.model, cfg_.data.seq_len);
}

void TrainingStep::check_layout() const {
  const comm::MeshShape& mesh = ctx_.mesh.shape();
  MT_REQUIRE(ConfigError, mesh.dp == cfg_.parallel.dp, "parallel.dp = ", cfg_.parallel.dp,
             " but the mesh's dp axis has ", mesh.dp, " ranks");
  MT_REQUIRE(ConfigError, mesh.tp == cfg_.parallel.tp, "parallel.tp = ", cfg_.parallel.tp, " but the mesh's tp axis has ",
             mesh.tp, " ranks");
  MT_REQUIRE(ConfigError, mesh.cp == cfg_.parallel.cp, "parallel.cp = ", cfg_.parallel.cp, " but the mesh's cp axis has ",
             mesh.cp, " ranks");
  MT_REQUIRE(ConfigError, mesh.pp == cfg_.parallel.pp, "parallel.pp = ", cfg_.parallel.pp, " but the mesh's pp axis has ",
             mesh.pp, " ranks");
  if (cfg_.training.reproducible)
    check_reproducible_window(mesh.dp, mesh.cp, cfg_.training.grad_accum, cfg_.parallel.replica_grad_accum);
}

void TrainingStep::build_programs() {
  const int p = ctx_.mesh.shape().pp, pp_rank = layout_->coord(comm::Axis::Pp);
  auto units_of = [this](int s) { return model_->segment_units(s); };
  // 1F1B with one stage is the plain loop F0 BW0 F1 BW1 ... of one device.
  pipeline_schedule_ = parallel::checked_schedule(cfg_.parallel.schedule, p, int(cfg_.training.grad_accum),
                                                 cfg_.parallel.virtual_stages);
  train_program_ = parallel::expand(pipeline_schedule_, pp_rank, layout_->chunks(), units_of, engine_->param_policy(),
                                    /*validated=*/true);
  std::vector<int> chunk_rank;
  for (const parallel::Chunk& c : layout_->chunks()) chunk_rank.push_back(c.pp_rank);
  eval_program_ = parallel::expand(parallel::forward_schedule(p, 1, chunk_rank), pp_rank, layout_->chunks(), units_of,
                                   engine_->param_policy());
  bubble_formula_ = parallel::bubble_formula(cfg_.parallel.schedule, p, int(cfg_.training.grad_accum),
                                             cfg_.parallel.virtual_stages);
}

void TrainingStep::mark(comm::StepPhase phase) const {
  activity::mark(comm::to_string(phase));
  if (ctx_.ledger) ctx_.ledger->set_position(-1, phase);
}

StepMetrics TrainingStep::run(const data::Batch& window, double lr, optim::LossScaler& scaler) {
  const auto t0 = Clock::now();
  const double collective0 = activity::collective_seconds();
  // Reproducible mode: GEMM bits independent of this rank's thread count, so
  // layouts that give a rank fewer cores still match bit for bit.
  const kernels::ScopedThreadInvariantGemm invariant(cfg_.training.reproducible);
  ctx_.allocator->tracker().reset_peaks();
  model_->tp_stats().reset();
  model_->cp_stats().reset();
  model_->moe_stats().reset();
  const int64_t G = cfg_.training.grad_accum, B = cfg_.training.micro_batch;
  MT_CHECK(window.rows == G * B, "window has ", window.rows, " rows, expected G * micro_batch = ", G * B);
  StepMetrics m;
  m.lr = lr;
  const int64_t N = count_targets(window, m);
  // 2. N = 0: every member skips (N is the same everywhere).
  if (N == 0) {
    m.skipped = true;
    m.skip_reason = "no supervised targets in the window (N = 0)";
  } else {
    train_window(window, N, scaler, m);
  }
  m.collective_s = activity::collective_seconds() - collective0;
  finish_metrics(m, std::chrono::duration<double>(Clock::now() - t0).count());
  m.skipped_total = scaler.skipped();
  return m;
}

int64_t TrainingStep::count_targets(const data::Batch& window, StepMetrics& m) {
  // 1. N over the data-parallel group, before any backward (docs/math.md (M.4)).
  mark(comm::StepPhase::Bookkeeping);
  int64_t counts[3] = {window.supervised_targets, window.non_pad_tokens, window.computed_positions};
  groups_.dp->all_reduce(counts, 3, DType::I64, comm::ReduceOp::Sum);
  m.supervised = counts[0];
  m.non_pad_tokens = counts[1];
  m.computed_positions = counts[2];
  m.padding_ratio = counts[2] ? 1.0 - double(counts[1]) / double(counts[2]) : 0.0;
  return m.supervised;
}

void TrainingStep::train_window(const data::Batch& window, int64_t N, optim::LossScaler& scaler, StepMetrics& m) {
  // 3. A replica with no local targets still runs every micro-step, so it
  // joins every collective. The coefficient (times the fp16 loss scale) is
  // rounded to f32 once, as the loss kernel uses it.
  const int64_t B = cfg_.training.micro_batch;
  const double scale = scaler.scale();
  const double coeff = float(engine_->loss_coefficient(N) * scale);
  engine_->begin_window();
  shard_.assign(window, B);
  const parallel::WindowResult r = executor_->run(
      train_program_, [&](int j) { return shard_.micro_batch(j * B, B); }, model::ForwardMode{true, coeff, false});
  mark(comm::StepPhase::GradSync);
  engine_->finish_grads();
  mark(comm::StepPhase::Bookkeeping);
  if (groups_.pp) record_pipeline(m);
  if (after_reduction_) after_reduction_();
  m.loss = reduce_loss(r) / double(N);
  m.moe = moe_metrics(model_->moe_stats(), cfg_.model, m.computed_positions, N,
                      int64_t(dtype_size(precision().compute)), groups_.ep != nullptr, *groups_.dp, groups_.pp);

  // 4. Unscale, then one finiteness decision over the whole world.
  mark(comm::StepPhase::Optimizer);
  const double sum_sq = engine_->grad_sum_squares() / (scale * scale);
  mark(comm::StepPhase::Bookkeeping);
  int32_t bad = !std::isfinite(sum_sq) || !std::isfinite(m.loss);
  groups_.world->all_reduce(&bad, 1, DType::I32, comm::ReduceOp::Max);
  scaler.update(bad != 0);
  m.grad_norm = std::sqrt(sum_sq);
  m.loss_scale = scale;
  if (bad) {
    m.skipped = true;
    m.skip_reason = scaler.enabled() ? "non-finite gradients on some rank: loss scale now " +
                                           std::to_string(scaler.scale())
                                     : "non-finite gradients or loss on some rank";
    return;
  }
  // 5. One clip coefficient from the global norm after reduction; the
  // optimizer unscales on the fly.
  m.clip_coef = optim::clip_coefficient(m.grad_norm, cfg_.optimizer.grad_clip);
  mark(comm::StepPhase::Publish);
  updating_ = true;
  engine_->step(m.lr, m.clip_coef / scale);
  updating_ = false;
  mark(comm::StepPhase::Bookkeeping);
}

void TrainingStep::finish_metrics(StepMetrics& m, double seconds) {
  m.seconds = seconds;
  m.tokens_per_s = double(m.supervised) / m.seconds;
  m.gflops = m.skipped ? 0 : flops_per_token_ * double(m.computed_positions) / m.seconds * 1e-9;
  m.comm_s = engine_->sync_stats().comm_s;
  m.comm_exposed_s = engine_->sync_stats().exposed_s;
  m.comm_buckets = engine_->sync_stats().buckets;
  m.comm_bytes = engine_->sync_stats().bytes;
  m.tp = tp_metrics(model_->tp_stats(), engine_->tp_sum_stats(), int(cfg_.model.n_layers));
  m.cp = cp_metrics(model_->cp_stats(), ctx_.mesh.shape().cp);
  m.memory = ctx_.allocator->tracker().snapshot();
}

double TrainingStep::reduce_loss(const parallel::WindowResult& r) {
  double loss_sum = r.loss_sum;
  if (cfg_.training.reproducible) {
    // The same tree over the global micro-batch index as the gradients; a
    // micro-batch's cp ranks (the data group's lowest index) hold subtrees
    // of its canonical token blocks, summed first (docs/math.md (M.74)).
    // Replicas' counts may differ (M.75): each sends the largest count's.
    const parallel::ParallelConfig& p = cfg_.parallel;
    const int64_t G = parallel::largest_micro_batches(p.replica_grad_accum, cfg_.training.grad_accum),
                  cp = groups_.cp ? groups_.cp->size() : 1;
    std::vector<double> mine = r.micro_loss, all(size_t(G * groups_.data->size()));
    mine.resize(size_t(G), 0.0);
    groups_.data->all_gather(mine.data(), all.data(), all.size(), DType::F64);
    std::vector<double> leaves;
    for (int d = 0; d < groups_.data->size() / cp; ++d)
      for (int64_t g = 0; g < parallel::replica_micro_batches(p, d, G); ++g) {
        std::vector<double> ranks;
        for (int64_t c = 0; c < cp; ++c) ranks.push_back(all[size_t((d * cp + c) * G + g)]);
        leaves.push_back(model::tree_sum(ranks));
      }
    loss_sum = model::tree_sum(leaves);
  } else {
    groups_.data->all_reduce(&loss_sum, 1, DType::F64, comm::ReduceOp::Sum);
  }
  if (groups_.pp) groups_.pp->all_reduce(&loss_sum, 1, DType::F64, comm::ReduceOp::Sum);
  return loss_sum;
}

parallel::WindowResult TrainingStep::forward_only(const data::Batch& rows) {
  const kernels::ScopedThreadInvariantGemm invariant(cfg_.training.reproducible);
  shard_.assign(rows, rows.rows);
  return executor_->run(eval_program_, [&](int) { return shard_.micro_batch(0, rows.rows); },
                        model::ForwardMode{false, 0.0, false});
}

void TrainingStep::record_pipeline(StepMetrics& m) {
  timeline_ = parallel::gather_timeline(*groups_.pp, executor_->timeline());
  timeline_.schedule = cfg_.parallel.schedule;
  timeline_.micro_batches = int(cfg_.training.grad_accum);
  timeline_.virtual_stages = cfg_.parallel.virtual_stages;
  m.pipeline_bubble = timeline_.measured_bubble();
  m.pipeline_bubble_formula = bubble_formula_;
  m.pipeline_receive_wait_s = 0;
  for (const parallel::ReceiveWait& w : executor_->receive_waits()) m.pipeline_receive_wait_s += w.end - w.start;
  m.pipeline_transfer_exposed_s = timeline_.exposed_transfer(executor_->receive_waits());
}

}  // namespace meshtrain::train
