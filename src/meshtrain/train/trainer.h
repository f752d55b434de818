// A training run's rank: the step machinery (training_step.h) fed by the
// data loader, the commit of each step (update count, data position),
// evaluation on the validation split (trainer_eval.cc) and checkpoints
// (trainer_checkpoint.cc).
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
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/resume_checks.h"
#include "meshtrain/train/train_config.h"
#include "meshtrain/train/training_step.h"

namespace meshtrain::train {

struct EvalResult {
  double loss = 0;  // mean loss per supervised target (nats)
  int64_t targets = 0;
  double loss_sum = 0;       // nats over all targets
  int64_t target_bytes = 0;  // bytes of text behind the targets (data/bits_per_byte.h)
  double bits_per_byte() const;
};

class Trainer {
 public:
  // Collective: every rank of ctx constructs its Trainer.
  Trainer(const TrainConfig& cfg, comm::ParallelContext& ctx, data::TokenDataset train_data,
          std::optional<data::TokenDataset> val_data);

  StepMetrics step();
  // One update on this replica's rows of a window (G * micro_batch rows).
  StepMetrics step_on(const data::Batch& local_window);
  EvalResult evaluate();

  TrainingStep& training_step() { return *steps_; }
  const TrainingStep& training_step() const { return *steps_; }
  model::Transformer& model() { return steps_->model(); }
  parallel::DataParallel& engine() { return steps_->engine(); }
  const parallel::LayoutPlan& layout() const { return steps_->layout(); }
  const parallel::Program& program() const { return steps_->program(); }
  const parallel::Schedule& pipeline_schedule() const { return steps_->pipeline_schedule(); }
  // The stage partition with each stage's predicted cost (stage_partition.h).
  std::string pipeline_description() const;
  // The last step's pipeline timeline (every stage, times from the window's
  // start; empty with one stage).
  const parallel::PipelineTimeline& pipeline_timeline() const { return steps_->pipeline_timeline(); }
  data::BatchLoader& loader() { return loader_; }
  int64_t steps_done() const { return step_; }
  const TrainConfig& config() const { return cfg_; }
  const data::TokenDataset& train_data() const { return train_; }
  const data::TokenDataset* validation_data() const { return val_ ? &*val_ : nullptr; }
  const model::ModelSpec& model_spec() const { return steps_->model().params().spec(); }
  const PrecisionPolicy& precision() const { return steps_->precision(); }
  const optim::LossScaler& loss_scaler() const { return scaler_; }
  double flops_per_token() const { return steps_->flops_per_token(); }
  int dp_size() const { return steps_->dp_group().size(); }
  // Rows per update over all replicas (the global window).
  int64_t window_rows() const;
  // The group gradients are summed and ZeRO state sharded over (dp x cp).
  comm::ProcessGroup& data_group() { return steps_->data_group(); }
  comm::ParallelContext& context() { return ctx_; }
  const comm::ParallelContext& context() const { return ctx_; }
  // ---- checkpoints (trainer_checkpoint.cc) ----
  // This rank's share of the state (parameter and Adam-moment boxes of
  // the global tensors, 1/R of every unit it holds) plus the run metadata.
  checkpoint::SaveRequest save_request() const;
  // Everything this rank holds of the state at its last completed step
  // (every parameter value and Adam moment of its units, replicas
  // included, not 1/R), for a checkpoint assembled from the ranks a
  // failure left (live_state.h); nullopt when the failure came while the
  // update was changing the state.
  std::optional<checkpoint::SaveRequest> live_state_request() const;
  // Collective: saves now (synchronously, or staged when checkpoint.async).
  void save_checkpoint();
  // Collective: restores what this rank's layout holds from `reader` (all
  // tensors and shapes checked before anything is copied: resume_checks.h).
  // WeightsOnly leaves the optimizer state fresh; checkpoints without a data
  // position (imports) also leave the data position fresh. Returns which
  // claim of docs/math.md, "Rule: restore claims", holds for continuing.
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
  void set_after_reduction(std::function<void(Trainer&)> fn);

 private:
  TrainConfig cfg_;
  comm::ParallelContext& ctx_;
  data::TokenDataset train_;
  std::optional<data::TokenDataset> val_;
  std::unique_ptr<TrainingStep> steps_;
  // The parts checkpoints read (owned by steps_).
  parallel::DataParallel* engine_ = nullptr;
  const parallel::LayoutPlan* layout_ = nullptr;
  optim::LrSchedule schedule_;
  optim::LossScaler scaler_;
  data::BatchLoader loader_;
  data::Batch window_;
  int64_t step_ = 0;
  // The data position and loss scale at step_ (the loader moves on when a
  // step starts): what live_state_request() records.
  struct Boundary {
    data::LoaderState loader;
    nlohmann::json scaler;
  } boundary_;
  void mark_boundary();
  // The pieces of [begin, end) of unit u's weights and moments (each where
  // this rank holds it), all copies when `replicas`.
  void add_unit_pieces(std::vector<checkpoint::TensorPiece>& out, int u, int64_t begin, int64_t end,
                       bool weights, bool moments, bool replicas) const;
  nlohmann::json state_metadata(const data::LoaderState& loader, const nlohmann::json& scaler) const;
  std::unique_ptr<checkpoint::AsyncCheckpointer> async_ckpt_;
  int64_t consumed_rows_ = 0, consumed_tokens_ = 0;
};

}  // namespace meshtrain::train
