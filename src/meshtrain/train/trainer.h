// The training step, SPEC Algorithm 29.1 (single data-parallel replica):
//   1. take the accumulation window (G micro-batches) and count its
//      supervised targets N first;
//   2. N = 0: skip the update consistently; else the loss coefficient is 1/N;
//   3. forward/backward every micro-batch with grads seeded by 1/N, so the
//      accumulated gradient is that of the one big batch (29.2)-(29.3);
//   4. joint finiteness decision;
//   5. global grad norm, one clip coefficient, AdamW;
//   6. commit the step count and the data position.
#pragma once

#include <memory>
#include <optional>

#include "meshtrain/data/batch.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/loader.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/optim/lr_schedule.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

struct EvalResult {
  double loss = 0;  // mean loss per supervised target (nats)
  int64_t targets = 0;
};

class Trainer {
 public:
  Trainer(const TrainConfig& cfg, data::TokenDataset train_data, std::optional<data::TokenDataset> val_data,
          std::shared_ptr<CachingAllocator> alloc = CachingAllocator::create());
  // Opens cfg.data.path, preparing it from cfg.data.sources first if needed.
  static std::unique_ptr<Trainer> from_config(const TrainConfig& cfg);

  StepMetrics step();
  // One update on a given window of G * micro_batch rows (what step() does
  // after reading the window from the loader).
  StepMetrics step_on(const data::Batch& window);
  EvalResult evaluate();
  // Runs cfg.training.steps updates with logging and periodic validation.
  void run(std::FILE* console = stdout);

  model::Transformer<float>& model() { return *model_; }
  optim::AdamW<float>& optimizer() { return *optimizer_; }
  data::BatchLoader& loader() { return loader_; }
  int64_t steps_done() const { return step_; }
  const TrainConfig& config() const { return cfg_; }
  const data::TokenDataset& train_data() const { return train_; }
  const std::optional<data::TokenDataset>& val_data() const { return val_; }

 private:

  TrainConfig cfg_;
  data::TokenDataset train_;
  std::optional<data::TokenDataset> val_;
  std::shared_ptr<CachingAllocator> alloc_;
  std::unique_ptr<model::Transformer<float>> model_;
  std::unique_ptr<optim::AdamW<float>> optimizer_;
  optim::LrSchedule schedule_;
  data::BatchLoader loader_;
  data::Batch window_;
  int64_t step_ = 0;
  double flops_per_token_ = 0;
};

}  // namespace meshtrain::train
