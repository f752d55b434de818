#include "meshtrain/train/ep_config.h"

#include "meshtrain/core/error.h"

namespace meshtrain::train {

void check_expert_parallel_config(const TrainConfig& cfg) {
  const int ep = cfg.parallel.ep, dp = cfg.parallel.dp;
  const int64_t E = cfg.model.n_experts;
  MT_REQUIRE(ConfigError, ep >= 1, "parallel.ep = ", ep, ": expected >= 1");
  // Routing decisions are made per row (moe_routing.h); context parallelism
  // cuts every row into chunks on several ranks.
  MT_REQUIRE(ConfigError, E == 0 || cfg.parallel.cp <= 1, "model.n_experts = ", E, " routes tokens per row, but ",
             "parallel.cp = ", cfg.parallel.cp, " splits every row over ", cfg.parallel.cp,
             " ranks: mixture-of-experts models run with parallel.cp = 1");
  if (ep == 1) return;
  MT_REQUIRE(ConfigError, E > 0, "parallel.ep = ", ep,
             " splits the experts of mixture-of-experts blocks, but model.n_experts = 0: set model.n_experts");
  MT_REQUIRE(ConfigError, E % ep == 0, "model.n_experts = ", E, " does not split over parallel.ep = ", ep, " (", E,
             " % ", ep, " = ", E % ep, "): every expert-parallel rank holds whole experts");
  // dp = 0 takes dp from the world size; the mesh checks it then.
  if (dp > 0)
    MT_REQUIRE(ConfigError, dp % ep == 0, "parallel.ep = ", ep, " must divide parallel.dp = ", dp,
               " (", dp, " % ", ep, " = ", dp % ep, "): expert parallelism is carved out of the data-parallel ranks");
}

}  // namespace meshtrain::train
