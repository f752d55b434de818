#include "meshtrain/train/meta_step.h"

#include "meshtrain/comm/recording/recording_context.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/train/run.h"
#include "meshtrain/train/training_step.h"

namespace meshtrain::train {

namespace {

// G x B rows of seq positions, one document a row, every position supervised.
data::Batch synthetic_window(const TrainConfig& cfg) {
  data::Batch b;
  b.reset(cfg.training.grad_accum * cfg.training.micro_batch, cfg.data.seq_len, 0);
  for (int64_t r = 0; r < b.rows; ++r) {
    for (int64_t i = 0; i < b.seq; ++i) {
      b.row_tokens(r)[i] = 1;
      b.row_targets(r)[i] = 1;
      b.row_positions(r)[i] = int32_t(i);
    }
    b.row_lengths[size_t(r)] = int32_t(b.seq);
  }
  b.recount();
  return b;
}

const char* dtype_key(DType t) {
  switch (t) {
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    default: return "fp32";
  }
}

}  // namespace

comm::MeshShape config_mesh(const TrainConfig& cfg) {
  TrainConfig c = cfg;
  if (c.parallel.dp == 0) c.parallel.dp = 1;
  return mesh_for(c, c.parallel.pp * c.parallel.dp * c.parallel.cp * c.parallel.tp);
}

TrainConfig config_for(const plan::StepInputs& in) {
  TrainConfig c;
  c.model = in.model;
  c.data.path = "(planned)";
  c.data.seq_len = in.seq_len;
  c.training.micro_batch = in.micro_batch;
  c.training.grad_accum = in.grad_accum;
  c.training.recompute = in.recompute;
  c.training.head_chunk_rows = in.head_chunk_rows;
  c.training.reproducible = in.parallel.reproducible;
  c.training.threads = in.threads_per_rank;
  c.training.precision = dtype_key(in.precision.params);
  c.training.grad_reduce_dtype = dtype_key(in.precision.grad_reduce);
  MT_REQUIRE(ConfigError, c.precision() == in.precision, "the planner runs the trainer's precision policies (fp32, ",
             "bf16, fp16), not ", in.precision.describe());
  c.parallel = in.parallel;
  c.parallel.dp = in.mesh.dp;
  c.parallel.tp = in.mesh.tp;
  c.parallel.pp = in.mesh.pp;
  c.parallel.cp = in.mesh.cp;
  c.parallel.ep = in.mesh.ep;
  c.parallel.zero_stage = in.layout.zero_stage;
  c.parallel.sequence_parallel = in.layout.sequence_parallel;
  c.parallel.virtual_stages = in.layout.virtual_stages;
  c.parallel.pp_layers = in.layout.pp_layers;
  c.parallel.schedule = in.schedule;
  return c;
}

plan::RankStep record_step(const TrainConfig& cfg, int rank, int completion_lag) {
  const fault::Quiet quiet;  // recording is not the run: its fault points neither count nor fire
  comm::ParallelContext ctx = comm::recording_context(config_mesh(cfg), rank, completion_lag);
  TrainConfig c = cfg;
  c.parallel.dp = ctx.mesh.shape().dp;
  TrainingStep step(c, ctx);
  optim::LossScaler scaler(step.config().training.loss_scale, step.config().precision().needs_loss_scaling());
  const data::Batch window = synthetic_window(step.config());
  // The first step creates what a run keeps between steps (the optimizer's
  // moments); the second is the one every later step repeats.
  step.run(window, 1e-3, scaler);
  plan::RankStep out;
  out.rank = rank;
  out.at_rest = ctx.allocator->tracker().snapshot();
  *ctx.ledger = comm::CommLedger();
  step.run(window, 1e-3, scaler);
  out.peak = ctx.allocator->tracker().snapshot();
  out.comm = *ctx.ledger;
  out.program = step.program();
  out.plan = std::make_shared<const parallel::LayoutPlan>(step.layout());
  out.live_micro_batches = step.live_micro_batches();
  return out;
}

plan::RankStep record_step(const plan::StepInputs& in, int rank, int completion_lag) {
  return record_step(config_for(in), rank, completion_lag);
}

plan::StepRecorder meta_step_recorder() {
  return [](const plan::StepInputs& in, int rank, int lag) { return record_step(in, rank, lag); };
}

}  // namespace meshtrain::train
