#include "meshtrain/train/option_effects.h"

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/parallel_config.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {

void check_parallel_options_take_effect(const parallel::ParallelConfig& p) {
  const parallel::ParallelConfig defaults;
  MT_REQUIRE(ConfigError, p.reshard_after_forward == defaults.reshard_after_forward || p.zero_stage == 3,
             "parallel.reshard_after_forward = false (layout reshard=0) has no effect under parallel.zero_stage = ",
             p.zero_stage, ": only ZeRO-3 gathers parameters and frees them after forward. Remove it, or use "
             "zero_stage = 3");
  MT_REQUIRE(ConfigError, p.keep_gathered == defaults.keep_gathered || p.zero_stage == 3,
             "parallel.keep_gathered = true (layout keep=1) has no effect under parallel.zero_stage = ", p.zero_stage,
             ": only ZeRO-3 gathers parameters per micro-batch. Remove it, or use zero_stage = 3");
  MT_REQUIRE(ConfigError, p.sequence_parallel == defaults.sequence_parallel || p.tp > 1,
             "parallel.sequence_parallel = true (layout sp=on) has no effect with parallel.tp = 1: it shards the "
             "sequence over the tensor-parallel ranks. Remove it, or set parallel.tp > 1");
}

void check_options_take_effect(const TrainConfig& cfg) {
  check_parallel_options_take_effect(cfg.parallel);
  MT_REQUIRE(ConfigError, cfg.comm.hardware.empty() || cfg.comm.hierarchical == "auto", "comm.hardware = \"",
             cfg.comm.hardware, "\" has no effect under comm.hierarchical = \"", cfg.comm.hierarchical,
             "\": the machine profile prices the two forms of a collective for \"auto\" only. Remove it, or set "
             "comm.hierarchical = \"auto\"");
  if (cfg.training.precision == "fp16") return;
  const optim::LossScaleConfig d, &l = cfg.training.loss_scale;
  const char* changed = l.initial != d.initial                 ? "training.loss_scale"
                        : l.growth_factor != d.growth_factor   ? "training.loss_scale_growth"
                        : l.backoff_factor != d.backoff_factor ? "training.loss_scale_backoff"
                        : l.growth_interval != d.growth_interval ? "training.loss_scale_window"
                        : l.hysteresis != d.hysteresis         ? "training.loss_scale_hysteresis"
                        : l.min_scale != d.min_scale           ? "training.loss_scale_min"
                                                               : nullptr;
  MT_REQUIRE(ConfigError, changed == nullptr, changed, " has no effect under training.precision = \"",
             cfg.training.precision, "\": dynamic loss scaling runs with fp16 only. Remove it, or set "
             "training.precision = \"fp16\"");
}

}  // namespace meshtrain::train
