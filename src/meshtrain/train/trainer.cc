#include "meshtrain/train/trainer.h"

#include "meshtrain/core/rank_activity.h"
#include "meshtrain/train/cp_config.h"
#include "meshtrain/train/data_setup.h"

namespace meshtrain::train {

Trainer::Trainer(const TrainConfig& cfg, comm::ParallelContext& ctx, data::TokenDataset train_data,
                 std::optional<data::TokenDataset> val_data)
    : cfg_(runnable(cfg)),
      ctx_(ctx),
      train_(std::move(train_data)),
      val_(std::move(val_data)),
      schedule_(cfg_.optimizer, cfg_.training.steps),
      scaler_(cfg_.training.loss_scale, cfg_.precision().needs_loss_scaling()),
      loader_(train_, loader_config(cfg_.data, sequence_multiple(cfg_))) {
  MT_REQUIRE(ConfigError, train_.tokenizer().vocab_size() <= cfg_.model.vocab_size, "model.vocab_size = ",
             cfg_.model.vocab_size, " is smaller than the dataset tokenizer's vocabulary (",
             train_.tokenizer().vocab_size(), ")");
  if (val_ && val_->num_documents() == 0) val_.reset();
  steps_ = std::make_unique<TrainingStep>(cfg_, ctx_);
  engine_ = &steps_->engine();
  layout_ = &steps_->layout();
  mark_boundary();
}

StepMetrics Trainer::step() {
  activity::set_step(step_ + 1);
  activity::mark("data");
  // The global window holds W * B rows (W = R * G, or the replicas' uneven
  // counts summed); replica d takes its own G_d * B after replicas 0 .. d-1.
  const int64_t B = cfg_.training.micro_batch, G = cfg_.training.grad_accum;
  const int d = steps_->dp_group().rank();
  const parallel::ParallelConfig& p = steps_->config().parallel;
  loader_.next_window(window_rows(), parallel::replica_first_micro_batch(p, d, G) * B,
                      parallel::replica_micro_batches(p, d, G) * B, &window_);
  return step_on(window_);
}

StepMetrics Trainer::step_on(const data::Batch& window) {
  StepMetrics m = steps_->run(window, schedule_.at(step_), scaler_);
  m.step = step_ + 1;
  // 6. Commit the update count and the consumed data position.
  ++step_;
  consumed_rows_ += window_rows();
  consumed_tokens_ += m.non_pad_tokens;
  mark_boundary();
  if (async_ckpt_) async_ckpt_->poll();
  return m;
}

int64_t Trainer::window_rows() const {
  return parallel::window_micro_batches(dp_size(), cfg_.parallel.replica_grad_accum, cfg_.training.grad_accum) *
         cfg_.training.micro_batch;
}

void Trainer::set_after_reduction(std::function<void(Trainer&)> fn) {
  if (!fn) return steps_->set_after_reduction({});
  steps_->set_after_reduction([this, fn = std::move(fn)] { fn(*this); });
}

std::string Trainer::pipeline_description() const {
  return parallel::pipeline_table(cfg_.parallel, cfg_.model, micro_batch_shape(cfg_), cfg_.training.grad_accum,
                                  precision().params);
}

}  // namespace meshtrain::train
