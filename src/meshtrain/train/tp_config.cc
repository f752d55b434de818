#include "meshtrain/train/tp_config.h"

#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::train {

void check_tensor_parallel_config(const TrainConfig& cfg) {
  const int tp = cfg.parallel.tp;
  model::check_tensor_parallel(cfg.model, tp);  // heads, KV heads
  // Every split placed on every rank: fewer vocabulary rows or hidden
  // columns than ranks cannot be (the message names the parameter).
  const model::ModelSpec global = model::build_model_spec(cfg.model);
  for (int r = 0; r < tp; ++r) {
    model::ModelPartition part;
    part.tp_size = tp;
    part.tp_rank = r;
    model::localize(global, cfg.model, part);
  }
  if (cfg.parallel.sequence_parallel)
    MT_REQUIRE(ConfigError, cfg.data.seq_len % tp == 0, "parallel.sequence_parallel = true shards every sequence over ",
               "parallel.tp = ", tp, " ranks, but data.seq_len = ", cfg.data.seq_len, " does not split (",
               cfg.data.seq_len, " % ", tp, " = ", cfg.data.seq_len % tp, "); use a multiple of ", tp);
}

}  // namespace meshtrain::train
