// One rank's training step, built once for a config on a context: the
// layout plan, the rank's part of the model, the data-parallel engine, the
// executor and the step programs, and the step itself (docs/math.md,
// Algorithm 1):
//   1. every replica holds the same parameter version; each takes its
//      disjoint rows of the global window and N = sum of supervised targets
//      is reduced over the data-parallel group (never tp or pp); under
//      context parallelism each cp rank keeps its chunks of those rows
//      (context_shard.h) and the loss and gradients are summed over dp x cp;
//   2. N = 0: every member skips; else the loss coefficient follows the
//      gradient collective's semantics;
//   3. the step program (the schedule's actions, expanded with the
//      engine's parameter actions) runs every micro-batch's forward and
//      backward, grads seeded by the coefficient, each unit's gradient
//      reduced once its last backward of the window is done;
//   4. unscale (fp16 loss scaling), joint finiteness decision (flag reduced
//      with Max over the world), every rank skips the same steps;
//   5. global norm of the unique parameters in canonical order, one clip
//      coefficient, owners step AdamW (f32 masters under 16-bit policies)
//      and publish parameters.
// The trainer (trainer.h) adds the data, the commit of the step, evaluation
// and checkpoints; the planner builds the same object on the meta device
// (meta_step.h) and records one step. Nothing here reads data files.
#pragma once

#include <functional>
#include <memory>

#include "meshtrain/comm/parallel_context.h"
#include "meshtrain/data/batch.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/optim/loss_scaler.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/parallel/executor.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/pipeline_config.h"
#include "meshtrain/parallel/rank_groups.h"
#include "meshtrain/parallel/timeline.h"
#include "meshtrain/train/context_shard.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

// The layout plan options a config asks for (pipeline chunks included).
parallel::LayoutOptions layout_options(const TrainConfig& cfg);
// The micro-batch the pipeline cost model weighs stages with.
parallel::MicroBatchShape micro_batch_shape(const TrainConfig& cfg);
// The config as the step runs it: validated, the engine's reproducible flag
// taken from training.reproducible.
TrainConfig runnable(TrainConfig cfg);

class TrainingStep {
 public:
  // Collective: every rank of ctx constructs its step.
  TrainingStep(const TrainConfig& cfg, comm::ParallelContext& ctx);

  // One update on this replica's rows of a window (G * micro_batch rows) at
  // learning rate lr; the loss scaler scales the loss and decides skips.
  StepMetrics run(const data::Batch& window, double lr, optim::LossScaler& scaler);
  // True while run() changes the rank's state (the optimizer update and
  // ZeRO's publish after it): a failure then leaves it between two steps.
  bool updating() const { return updating_; }
  // Forward only over `rows` (one micro-batch of this replica, any number of
  // rows; every rank of the group runs it, rows or none): the loss sum and
  // count of the targets whose head this rank holds, and their text bytes.
  parallel::WindowResult forward_only(const data::Batch& rows);
  // This rank's share of the rows forward_only last ran (its cp chunks).
  const data::Batch& local_rows() const { return shard_.local(); }
  // Drops the parameters ZeRO-3 gathered for forward-only passes.
  void release_gathered() { engine_->release_gathered(); }

  model::Transformer& model() { return *model_; }
  const model::Transformer& model() const { return *model_; }
  parallel::DataParallel& engine() { return *engine_; }
  const parallel::DataParallel& engine() const { return *engine_; }
  const parallel::LayoutPlan& layout() const { return *layout_; }
  const parallel::Program& program() const { return train_program_; }
  const parallel::Program& eval_program() const { return eval_program_; }
  const parallel::Schedule& pipeline_schedule() const { return pipeline_schedule_; }
  // The last step's pipeline timeline (every stage; empty with one stage).
  const parallel::PipelineTimeline& pipeline_timeline() const { return timeline_; }
  // Most micro-batches whose activations the rank held at once in the last step.
  int live_micro_batches() const { return executor_->peak_live_micro_batches(); }
  const TrainConfig& config() const { return cfg_; }
  const PrecisionPolicy& precision() const { return model_->params().precision(); }
  double flops_per_token() const { return flops_per_token_; }
  const parallel::RankGroups& groups() const { return groups_; }
  comm::ProcessGroup& dp_group() { return *groups_.dp; }
  // The group gradients are summed and ZeRO state sharded over (dp x cp).
  comm::ProcessGroup& data_group() { return *groups_.data; }
  comm::ParallelContext& context() { return ctx_; }
  // A line per data-parallel group spanning nodes: flat or hierarchical, and
  // why (train/hierarchy.h); empty on one node.
  const std::string& hierarchy_note() const { return hierarchy_note_; }

  // Called after gradients are reduced, before the norm (fault injection in
  // tests, debugging tools).
  void set_after_reduction(std::function<void()> fn) { after_reduction_ = std::move(fn); }

 private:
  void check_layout() const;
  void build_programs();
  void mark(comm::StepPhase phase) const;  // stamps the recording ledger, when there is one
  // Algorithm 1's stages (docs/math.md): 1. N over the data-parallel group
  // (returned, with the window's counts in m); 3-5. the window's forward and
  // backward, the finiteness decision and the update; the step's figures.
  int64_t count_targets(const data::Batch& window, StepMetrics& m);
  void train_window(const data::Batch& window, int64_t N, optim::LossScaler& scaler, StepMetrics& m);
  void finish_metrics(StepMetrics& m, double seconds);
  double reduce_loss(const parallel::WindowResult& r);
  void record_pipeline(StepMetrics& m);  // gathers the stages' timelines, the measured bubble

  TrainConfig cfg_;
  comm::ParallelContext& ctx_;
  std::string hierarchy_note_;  // which form the data-parallel groups run in (train/hierarchy.h)
  std::unique_ptr<parallel::LayoutPlan> layout_;
  parallel::RankGroups groups_;  // resolved once from the plan: every group the step uses
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<parallel::DataParallel> engine_;
  std::unique_ptr<parallel::StepExecutor> executor_;
  parallel::Schedule pipeline_schedule_;
  parallel::Program train_program_, eval_program_;
  parallel::PipelineTimeline timeline_;
  double bubble_formula_ = 0;
  ContextShard shard_;  // this rank's chunks of the rows under context parallelism
  double flops_per_token_ = 0;
  std::function<void()> after_reduction_;
  bool updating_ = false;
};

}  // namespace meshtrain::train
