// The training step, SPEC Algorithm 29.1, for any layout the layout plan
// describes (one code path; a single rank is a mesh of size 1):
//   1. every replica holds the same parameter version; each takes its
//      disjoint rows of the global window and N = sum of supervised targets
//      is reduced over the data-parallel group (never tp or pp); under
//      context parallelism each cp rank keeps its chunks of those rows
//      (context_shard.h) and the loss and gradients are summed over dp x cp;
//   2. N = 0: every member skips; else the loss coefficient follows the
//      gradient collective's semantics (29.4);
//   3. the step program (the schedule's actions, expanded with the
//      engine's parameter actions) runs every micro-batch's forward and
//      backward, grads seeded by the coefficient, each unit's gradient
//      reduced once its last backward of the window is done;
//   4. unscale (fp16 loss scaling), joint finiteness decision (flag reduced
//      with Max over the world), every rank skips the same steps;
//   5. global norm of the unique parameters in canonical order, one clip
//      coefficient, owners step AdamW (f32 masters under 16-bit policies)
//      and publish parameters;
//   6. commit the step and the data position.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "meshtrain/checkpoint/async_checkpointer.h"
#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/comm/parallel_context.h"
#include "meshtrain/data/batch.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/loader.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/optim/loss_scaler.h"
#include "meshtrain/optim/lr_schedule.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/parallel/executor.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/pipeline_config.h"
#include "meshtrain/parallel/timeline.h"
#include "meshtrain/train/context_shard.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/resume_checks.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

struct EvalResult {
  double loss = 0;  // mean loss per supervised target (nats)
  int64_t targets = 0;
  double loss_sum = 0;       // nats over all targets
  int64_t target_bytes = 0;  // bytes of text behind the targets (data/bits_per_byte.h)
  double bits_per_byte() const;
};

// The layout plan options a config asks for (pipeline chunks included).
parallel::LayoutOptions layout_options(const TrainConfig& cfg);
// The micro-batch the pipeline cost model weighs stages with.
parallel::MicroBatchShape micro_batch_shape(const TrainConfig& cfg);

class Trainer {
 public:
  // Collective: every rank of ctx constructs its Trainer.
  Trainer(const TrainConfig& cfg, comm::ParallelContext& ctx, data::TokenDataset train_data,
          std::optional<data::TokenDataset> val_data);

  StepMetrics step();
  // One update on this replica's rows of a window (G * micro_batch rows).
  StepMetrics step_on(const data::Batch& local_window);
  EvalResult evaluate();

  model::Transformer& model() { return *model_; }
  parallel::DataParallel& engine() { return *engine_; }
  const parallel::LayoutPlan& layout() const { return *layout_; }
  const parallel::Program& program() const { return train_program_; }
  const parallel::Schedule& pipeline_schedule() const { return pipeline_schedule_; }
  // The stage partition with each stage's predicted cost (stage_partition.h).
  std::string pipeline_description() const;
  // The last step's pipeline timeline (every stage, times from the window's
  // start; empty with one stage).
  const parallel::PipelineTimeline& pipeline_timeline() const { return timeline_; }
  data::BatchLoader& loader() { return loader_; }
  int64_t steps_done() const { return step_; }
  const TrainConfig& config() const { return cfg_; }
  const data::TokenDataset& train_data() const { return train_; }
  const data::TokenDataset* validation_data() const { return val_ ? &*val_ : nullptr; }
  const model::ModelSpec& model_spec() const { return model_->params().spec(); }
  const PrecisionPolicy& precision() const { return model_->params().precision(); }
  const optim::LossScaler& loss_scaler() const { return scaler_; }
  double flops_per_token() const { return flops_per_token_; }
  int dp_size() const { return dp_.size(); }
  // The group gradients are summed and ZeRO state sharded over (dp x cp).
  comm::ProcessGroup& data_group() { return data_; }
  comm::ParallelContext& context() { return ctx_; }
  // ---- checkpoints (trainer_checkpoint.cc) ----
  // This rank's share of the state (parameter and Adam-moment boxes of
  // the global tensors, 1/R of every unit it holds) plus the run metadata.
  checkpoint::SaveRequest save_request() const;
  // Collective: saves now (synchronously, or staged when checkpoint.async).
  void save_checkpoint();
  // Collective: restores what this rank's layout holds from `reader` (all
  // tensors and shapes checked before anything is copied: resume_checks.h).
  // WeightsOnly leaves the optimizer state fresh; checkpoints without a
  // data position (imports) also leave the data position fresh. Returns
  // which claim of SPEC S9 holds for continuing.
  std::string restore(const checkpoint::CheckpointReader& reader, RestoreScope scope = RestoreScope::Full);
  // Weights from a .safetensors file (HF names), optimizer fresh.
  void init_from_safetensors(const std::string& path);
  // Resumes from <checkpoint dir>/latest when present, else applies
  // checkpoint.init_from; returns a line for the log ("" if nothing).
  std::string resume_or_init();
  void finish_checkpoints();  // waits for an async save
  // The asynchronous checkpointer (null unless checkpoint.async saved once):
  // its last_committed() tells when a staged save was committed.
  const checkpoint::AsyncCheckpointer* async_checkpointer() const { return async_ckpt_.get(); }

  // Called after gradients are reduced, before the norm (fault injection in
  // tests, debugging tools).
  void set_after_reduction(std::function<void(Trainer&)> fn) { after_reduction_ = std::move(fn); }

 private:
  void record_pipeline(StepMetrics& m);  // gathers the stages' timelines, the measured bubble
  TrainConfig cfg_;
  comm::ParallelContext& ctx_;
  comm::ProcessGroup& dp_;    // replicas: each takes its own rows of the window
  comm::ProcessGroup& data_;  // dp x cp: every rank holding a part of the loss (the engine's group)
  data::TokenDataset train_;
  std::optional<data::TokenDataset> val_;
  std::unique_ptr<parallel::LayoutPlan> layout_;
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<parallel::DataParallel> engine_;
  std::shared_ptr<comm::ProcessGroup> tie_group_;
  std::unique_ptr<parallel::StepExecutor> executor_;
  parallel::Schedule pipeline_schedule_;
  parallel::Program train_program_, eval_program_;
  parallel::PipelineTimeline timeline_;
  double bubble_formula_ = 0;
  optim::LrSchedule schedule_;
  optim::LossScaler scaler_;
  data::BatchLoader loader_;
  data::Batch window_;
  ContextShard shard_;  // this rank's chunks of the rows under context parallelism
  int64_t step_ = 0;
  double flops_per_token_ = 0;
  std::function<void(Trainer&)> after_reduction_;
  std::unique_ptr<checkpoint::AsyncCheckpointer> async_ckpt_;
  int64_t consumed_rows_ = 0, consumed_tokens_ = 0;
};

}  // namespace meshtrain::train
