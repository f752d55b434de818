#include "meshtrain/train/tp_config.h"

#include "meshtrain/core/error.h"
#include "meshtrain/model/canonical_sum.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/model/tree_reduce.h"
#include "meshtrain/train/cp_config.h"

namespace meshtrain::train {

namespace {

// Reproducible mode's canonical blocks (docs/math.md (M.73)) against the layout.
void check_canonical_blocks(const TrainConfig& cfg) {
  const int blocks = cfg.training.reproducible_blocks, tp = cfg.parallel.tp;
  MT_REQUIRE(ConfigError, model::is_power_of_two(blocks), "training.reproducible_blocks = ", blocks,
             ": expected a power of two (the canonical blocks are summed in a binary tree, docs/math.md (M.73))");
  MT_REQUIRE(ConfigError, blocks % tp == 0, "training.reproducible_blocks = ", blocks, " canonical blocks do not ",
             "split over parallel.tp = ", tp, " ranks (", blocks, " % ", tp, " = ", blocks % tp,
             "): each rank sums whole blocks; use a multiple of ", tp);
  const int cp = cfg.parallel.cp;
  MT_REQUIRE(ConfigError, blocks % cp == 0, "training.reproducible_blocks = ", blocks, " canonical token blocks do "
             "not split over parallel.cp = ", cp, " ranks (", blocks, " % ", cp, " = ", blocks % cp,
             "): each rank holds whole blocks; use a multiple of ", cp);
  const int sp = cfg.parallel.sequence_parallel ? tp : 1;
  MT_REQUIRE(ConfigError, blocks % (cp * sp) == 0, "training.reproducible_blocks = ", blocks, " canonical token "
             "blocks do not split over parallel.cp x parallel.tp = ", cp, " x ", sp, " sequence shards (", blocks,
             " % ", cp * sp, " = ", blocks % (cp * sp), "): use a multiple of ", cp * sp);
  MT_REQUIRE(ConfigError, cfg.data.seq_len % (2 * int64_t(blocks)) == 0, "training.reproducible cuts every row into "
             "2 x training.reproducible_blocks = ", 2 * blocks, " chunks (canonical token block i: chunks i and ",
             2 * blocks - 1, " - i, docs/math.md (M.74)), but data.seq_len = ", cfg.data.seq_len, " does not split (",
             cfg.data.seq_len, " % ", 2 * blocks, " = ", cfg.data.seq_len % (2 * blocks),
             "); use a multiple of ", 2 * blocks, " or fewer blocks");
  const int64_t m = sequence_multiple(cfg);
  MT_REQUIRE(ConfigError, cfg.data.mode != "padded" || cfg.data.seq_len % m == 0, "training.reproducible pads "
             "every row of a padded window to a multiple of ", m, " positions (training.reproducible_blocks and the "
             "sequence splits: the same tokens on every layout), but data.seq_len = ", cfg.data.seq_len,
             " is not one (", cfg.data.seq_len, " % ", m, " = ", cfg.data.seq_len % m, ")");
}

}  // namespace

void check_tensor_parallel_config(const TrainConfig& cfg) {
  const int tp = cfg.parallel.tp;
  model::check_tensor_parallel(cfg.model, tp);  // heads, KV heads
  // Every split placed on every rank: fewer vocabulary rows or hidden
  // columns than ranks cannot be (the message names the parameter).
  const int blocks = cfg.training.canonical_blocks();
  if (cfg.training.reproducible) check_canonical_blocks(cfg);
  const model::ModelSpec global = model::build_model_spec(cfg.model);
  for (int r = 0; r < tp; ++r) {
    model::ModelPartition part;
    part.tp_size = tp;
    part.tp_rank = r;
    part.canonical_blocks = blocks;
    const model::ModelSpec local = model::localize(global, cfg.model, part);
    // Every split dimension whole canonical blocks on every rank (ConfigError naming the parameter).
    for (const model::ParamSpec& p : local.params)
      if (p.tp.is_shard()) model::local_blocks(p, p.tp.dim, blocks);
  }
  if (cfg.parallel.sequence_parallel)
    MT_REQUIRE(ConfigError, cfg.data.seq_len % tp == 0, "parallel.sequence_parallel = true shards every sequence over ",
               "parallel.tp = ", tp, " ranks, but data.seq_len = ", cfg.data.seq_len, " does not split (",
               cfg.data.seq_len, " % ", tp, " = ", cfg.data.seq_len % tp, "); use a multiple of ", tp);
}

}  // namespace meshtrain::train
