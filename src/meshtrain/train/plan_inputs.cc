#include "meshtrain/train/plan_inputs.h"

#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

plan::StepInputs step_inputs(const TrainConfig& cfg) {
  plan::StepInputs in;
  in.model = cfg.model;
  in.mesh.dp = cfg.parallel.dp == 0 ? 1 : cfg.parallel.dp;
  in.mesh.tp = cfg.parallel.tp;
  in.mesh.pp = cfg.parallel.pp;
  in.mesh.cp = cfg.parallel.cp;
  in.mesh.ep = cfg.parallel.ep;
  // As the trainer builds its LayoutPlan: pipeline chunks from the cost
  // model (or parallel.pp_layers), virtual stages, placement, sequence
  // parallelism.
  in.layout = layout_options(cfg);
  in.parallel = cfg.parallel;
  in.parallel.reproducible = cfg.training.reproducible;  // as Trainer's validated() sets it
  in.precision = cfg.precision();
  in.recompute = cfg.training.recompute;
  in.head_chunk_rows = cfg.training.head_chunk_rows;
  in.micro_batch = cfg.training.micro_batch;
  in.grad_accum = cfg.training.grad_accum;
  in.seq_len = cfg.data.seq_len;
  in.schedule = cfg.parallel.schedule;
  in.threads_per_rank = cfg.training.threads;
  in.hierarchical = comm::parse_hierarchical_mode(cfg.comm.hierarchical);
  return in;
}

plan::StepInputs step_inputs(const TrainConfig& cfg, const Layout& layout) {
  return step_inputs(with_layout(cfg, layout));
}

}  // namespace meshtrain::train
