#include "meshtrain/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "meshtrain/data/bits_per_byte.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/parallel/tree_reduce.h"
#include "meshtrain/parallel/tie_group.h"
#include "meshtrain/train/cp_config.h"
#include "meshtrain/train/data_setup.h"

namespace meshtrain::train {

namespace {

using Clock = std::chrono::steady_clock;

TrainConfig validated(TrainConfig cfg) {
  cfg.validate();
  cfg.parallel.reproducible = cfg.training.reproducible;
  return cfg;
}

}  // namespace

parallel::LayoutOptions layout_options(const TrainConfig& cfg) {
  parallel::LayoutOptions o;
  o.zero_stage = cfg.parallel.zero_stage;
  o.sequence_parallel = cfg.parallel.sequence_parallel;
  parallel::set_pipeline_options(o, cfg.parallel, cfg.model, micro_batch_shape(cfg));
  return o;
}

parallel::MicroBatchShape micro_batch_shape(const TrainConfig& cfg) {
  return {cfg.training.micro_batch, cfg.data.seq_len, cfg.training.recompute,
          cfg.precision().compute};
}

Trainer::Trainer(const TrainConfig& cfg, comm::ParallelContext& ctx, data::TokenDataset train_data,
                 std::optional<data::TokenDataset> val_data)
    : cfg_(validated(cfg)),
      ctx_(ctx),
      dp_(ctx.group("dp")),
      data_(ctx.group(ctx.mesh.shape().cp > 1 ? std::vector<std::string>{"dp", "cp"} : std::vector<std::string>{"dp"})),
      train_(std::move(train_data)),
      val_(std::move(val_data)),
      schedule_(cfg_.optimizer, cfg_.training.steps),
      scaler_(cfg_.training.loss_scale, cfg_.precision().needs_loss_scaling()),
      loader_(train_, loader_config(cfg_.data, sequence_multiple(cfg_))),
      shard_(ctx.mesh.shape().cp, ctx.mesh.coord("cp")) {
  MT_REQUIRE(ConfigError, dp_.size() == cfg_.parallel.dp, "parallel.dp = ", cfg_.parallel.dp,
             " but the mesh's dp axis has ", dp_.size(), " ranks");
  MT_REQUIRE(ConfigError, ctx_.mesh.shape().tp == cfg_.parallel.tp, "parallel.tp = ", cfg_.parallel.tp,
             " but the mesh's tp axis has ", ctx_.mesh.shape().tp, " ranks");
  MT_REQUIRE(ConfigError, ctx_.mesh.shape().cp == cfg_.parallel.cp, "parallel.cp = ", cfg_.parallel.cp,
             " but the mesh's cp axis has ", ctx_.mesh.shape().cp, " ranks");
  MT_REQUIRE(ConfigError, ctx_.mesh.shape().pp == cfg_.parallel.pp, "parallel.pp = ", cfg_.parallel.pp,
             " but the mesh's pp axis has ", ctx_.mesh.shape().pp, " ranks");
  MT_REQUIRE(ConfigError, train_.tokenizer().vocab_size() <= cfg_.model.vocab_size, "model.vocab_size = ",
             cfg_.model.vocab_size, " is smaller than the dataset tokenizer's vocabulary (",
             train_.tokenizer().vocab_size(), ")");
  if (val_ && val_->num_documents() == 0) val_.reset();
  if (cfg_.training.reproducible) check_reproducible_window(dp_.size(), ctx_.mesh.shape().cp, cfg_.training.grad_accum);
  // Reproducible mode: GEMM bits independent of this rank's thread count, so
  // layouts that give a rank fewer cores still match bit for bit.
  kernels::set_thread_invariant_gemm(cfg_.training.reproducible);
  layout_ = std::make_unique<parallel::LayoutPlan>(cfg_.model, ctx_.mesh.shape(), ctx_.rank, layout_options(cfg_));
  model::ExecOptions exec;
  exec.recompute = cfg_.training.recompute;
  exec.materialize_params = false;
  exec.precision = cfg_.precision();
  exec.sequence_parallel = cfg_.parallel.sequence_parallel;
  comm::ProcessGroup* tp = ctx_.mesh.shape().tp > 1 ? &ctx_.group("tp") : nullptr;
  comm::ProcessGroup* cp = ctx_.mesh.shape().cp > 1 ? &ctx_.group("cp") : nullptr;
  comm::ProcessGroup* ep = ctx_.mesh.shape().ep > 1 ? &ctx_.group("ep") : nullptr;
  model_ = std::make_unique<model::Transformer>(cfg_.model, ctx_.allocator, exec, layout_->partition(), tp, cp, ep);
  comm::ProcessGroup* pp = ctx_.mesh.shape().pp > 1 ? &ctx_.group("pp") : nullptr;
  tie_group_ = parallel::make_tie_group(pp, layout_->tie_stages());
  parallel::ExpertGroups experts;
  if (ep) experts = {&ctx_.group("edp"), &ctx_.group({"pp", "tp", "ep"})};
  engine_ = std::make_unique<parallel::DataParallel>(*model_, *layout_, data_, ctx_.group({"pp", "tp"}), cfg_.parallel,
                                                     cfg_.optimizer, ctx_.allocator, tp, tie_group_.get(), experts);
  executor_ = std::make_unique<parallel::StepExecutor>(*model_, engine_.get(), pp);
  const int p = ctx_.mesh.shape().pp, pp_rank = layout_->coord("pp");
  auto units_of = [this](int s) { return model_->segment_units(s); };
  // 1F1B with one stage is the plain loop F0 BW0 F1 BW1 ... of one device.
  pipeline_schedule_ = parallel::make_schedule(cfg_.parallel.schedule, p, int(cfg_.training.grad_accum),
                                      cfg_.parallel.virtual_stages);
  train_program_ = parallel::expand(pipeline_schedule_, pp_rank, layout_->chunks(), units_of, engine_->param_policy());
  std::vector<int> chunk_rank;
  for (const parallel::Chunk& c : layout_->chunks()) chunk_rank.push_back(c.pp_rank);
  eval_program_ = parallel::expand(parallel::forward_schedule(p, 1, chunk_rank), pp_rank, layout_->chunks(), units_of,
                                   engine_->param_policy());
  flops_per_token_ = model::model_flops_per_token(cfg_.model, cfg_.data.seq_len);
  bubble_formula_ = parallel::bubble_formula(cfg_.parallel.schedule, p, int(cfg_.training.grad_accum),
                                             cfg_.parallel.virtual_stages);
}

StepMetrics Trainer::step() {
  // The global window holds R * G * B rows; replica r takes its own G * B.
  const int64_t local = cfg_.training.grad_accum * cfg_.training.micro_batch;
  loader_.next_window(local * dp_.size(), local * dp_.rank(), local, &window_);
  return step_on(window_);
}

StepMetrics Trainer::step_on(const data::Batch& window) {
  const auto t0 = Clock::now();
  ctx_.allocator->tracker().reset_peaks();
  model_->tp_stats().reset();
  model_->cp_stats().reset();
  model_->moe_stats().reset();
  const int64_t G = cfg_.training.grad_accum, B = cfg_.training.micro_batch;
  MT_CHECK(window.rows == G * B, "window has ", window.rows, " rows, expected G * micro_batch = ", G * B);
  StepMetrics m;
  m.step = step_ + 1;
  m.lr = schedule_.at(step_);

  // 1. N over the data-parallel group, before any backward (29.2).
  int64_t counts[3] = {window.supervised_targets, window.non_pad_tokens, window.computed_positions};
  dp_.all_reduce(counts, 3, DType::I64, comm::ReduceOp::Sum);
  m.supervised = counts[0];
  m.non_pad_tokens = counts[1];
  m.computed_positions = counts[2];
  m.padding_ratio = counts[2] ? 1.0 - double(counts[1]) / double(counts[2]) : 0.0;  // (29.1)
  const int64_t N = m.supervised;

  // 2. N = 0: every member skips (N is the same everywhere).
  if (N == 0) {
    m.skipped = true;
    m.skip_reason = "no supervised targets in the window (N = 0)";
  } else {
    // 3. A replica with no local targets still runs every micro-step, so it
    // joins every collective. The coefficient (times the fp16 loss scale) is
    // rounded to f32 once, as the loss kernel uses it.
    const double scale = scaler_.scale();
    const double coeff = float(engine_->loss_coefficient(N) * scale);
    engine_->begin_window();
    shard_.assign(window, B);
    const parallel::WindowResult r = executor_->run(
        train_program_, [&](int j) { return shard_.micro_batch(j * B, B); }, model::ForwardMode{true, coeff, false});
    engine_->finish_grads();
    if (ctx_.mesh.shape().pp > 1) record_pipeline(m);
    if (after_reduction_) after_reduction_(*this);
    double loss_sum = r.loss_sum;
    if (cfg_.training.reproducible) {
      // The same tree over the global micro-batch index as the gradients.
      std::vector<double> mine = r.micro_loss, all(size_t(G * data_.size()));
      mine.resize(size_t(G), 0.0);
      data_.all_gather(mine.data(), all.data(), all.size(), DType::F64);
      loss_sum = parallel::tree_sum(all);
    } else {
      data_.all_reduce(&loss_sum, 1, DType::F64, comm::ReduceOp::Sum);
    }
    if (ctx_.mesh.shape().pp > 1) ctx_.group("pp").all_reduce(&loss_sum, 1, DType::F64, comm::ReduceOp::Sum);
    m.loss = loss_sum / double(N);
    m.moe = moe_metrics(model_->moe_stats(), cfg_.model, m.computed_positions, N,
                        int64_t(dtype_size(precision().compute)), ctx_.mesh.shape().ep > 1, dp_,
                        ctx_.mesh.shape().pp > 1 ? &ctx_.group("pp") : nullptr);

    // 4. Unscale, then one finiteness decision over the whole world.
    const double sum_sq = engine_->grad_sum_squares() / (scale * scale);
    int32_t bad = !std::isfinite(sum_sq) || !std::isfinite(m.loss);
    ctx_.world->all_reduce(&bad, 1, DType::I32, comm::ReduceOp::Max);
    scaler_.update(bad != 0);
    m.grad_norm = std::sqrt(sum_sq);
    m.loss_scale = scale;
    if (bad) {
      m.skipped = true;
      m.skip_reason = scaler_.enabled() ? "non-finite gradients on some rank: loss scale now " +
                                              std::to_string(scaler_.scale())
                                        : "non-finite gradients or loss on some rank";
    } else {
      // 5. One clip coefficient from the global norm after reduction; the
      // optimizer unscales on the fly.
      m.clip_coef = optim::clip_coefficient(m.grad_norm, cfg_.optimizer.grad_clip);
      engine_->step(m.lr, m.clip_coef / scale);
    }
  }
  // 6. Commit the update count and the consumed data position.
  ++step_;
  consumed_rows_ += cfg_.training.grad_accum * cfg_.training.micro_batch * dp_.size();
  consumed_tokens_ += m.non_pad_tokens;
  if (async_ckpt_) async_ckpt_->poll();
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.tokens_per_s = double(N) / m.seconds;
  m.gflops = m.skipped ? 0 : flops_per_token_ * double(m.computed_positions) / m.seconds * 1e-9;
  m.comm_s = engine_->sync_stats().comm_s;
  m.comm_exposed_s = engine_->sync_stats().exposed_s;
  m.comm_buckets = engine_->sync_stats().buckets;
  m.comm_bytes = engine_->sync_stats().bytes;
  m.skipped_total = scaler_.skipped();
  m.tp = tp_metrics(model_->tp_stats(), engine_->tp_sum_stats(), int(cfg_.model.n_layers));
  m.cp = cp_metrics(model_->cp_stats(), ctx_.mesh.shape().cp);
  m.memory = ctx_.allocator->tracker().snapshot();
  return m;
}

double EvalResult::bits_per_byte() const { return data::bits_per_byte(loss_sum, target_bytes); }
std::string Trainer::pipeline_description() const {
  return parallel::pipeline_table(cfg_.parallel, cfg_.model, micro_batch_shape(cfg_), cfg_.training.grad_accum,
                                  precision().params);
}

void Trainer::record_pipeline(StepMetrics& m) {
  timeline_ = parallel::gather_timeline(ctx_.group("pp"), executor_->timeline());
  timeline_.schedule = cfg_.parallel.schedule;
  timeline_.micro_batches = int(cfg_.training.grad_accum);
  timeline_.virtual_stages = cfg_.parallel.virtual_stages;
  m.pipeline_bubble = timeline_.measured_bubble();
  m.pipeline_bubble_formula = bubble_formula_;
}

EvalResult Trainer::evaluate() {
  EvalResult r;
  if (!val_) return r;
  data::ValidationIterator it(*val_, data::parse_batch_mode(cfg_.data.mode), cfg_.data.seq_len, sequence_multiple(cfg_));
  data::Batch b;
  const int64_t B = cfg_.training.micro_batch, R = dp_.size();
  const int64_t limit = cfg_.training.eval_rows;
  double sums[3] = {0, 0, 0};  // loss sum, targets, target bytes
  const model::ForwardMode forward_only{false, 0.0, false};
  for (int64_t rows = 0; limit == 0 || rows < limit; rows += R * B) {
    // Every rank takes part in every window (the same count on all ranks).
    // The last window is cut at eval_rows, so every layout evaluates the
    // same rows (and validation losses of two layouts compare).
    const int64_t w = limit == 0 ? R * B : std::min(R * B, limit - rows);
    const int64_t first = std::min(dp_.rank() * B, w);
    it.next_window(w, first, std::min(B, w - first), &b);
    int64_t any = b.rows;
    dp_.all_reduce(&any, 1, DType::I64, comm::ReduceOp::Max);
    if (any == 0) break;
    if (b.rows > 0) {
      shard_.assign(b, b.rows);
      const auto res = executor_->run(eval_program_, [&](int) { return shard_.micro_batch(0, b.rows); }, forward_only);
      sums[0] += res.loss_sum;
      sums[1] += double(res.count);
      // Bytes where the loss is counted (the last pipeline stage), so the
      // sum over pp below counts them once.
      // (This rank's chunks under context parallelism: summed over cp below.)
      if (res.count > 0) sums[2] += double(data::supervised_bytes(shard_.local(), val_->tokenizer()));
    } else {
      // Nothing left for this rank: a padding-only row keeps its collectives
      // (stage-3 gathers) in step with the other ranks; it adds no target.
      data::Batch pad;
      pad.reset(1, cfg_.data.seq_len, val_->tokenizer().pad_id());
      shard_.assign(pad, 1);
      executor_->run(eval_program_, [&](int) { return shard_.micro_batch(0, 1); }, forward_only);
    }
  }
  engine_->release_gathered();
  data_.all_reduce(sums, 3, DType::F64, comm::ReduceOp::Sum);
  if (ctx_.mesh.shape().pp > 1) ctx_.group("pp").all_reduce(sums, 3, DType::F64, comm::ReduceOp::Sum);
  r.loss_sum = sums[0];
  r.targets = int64_t(sums[1]);
  r.target_bytes = int64_t(sums[2]);
  r.loss = r.targets ? sums[0] / sums[1] : 0.0;
  return r;
}

}  // namespace meshtrain::train
