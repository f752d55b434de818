#include "meshtrain/app/plan.h"

#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::app {

std::string plan(const PlanRequest& q) {
  const train::TrainConfig cfg = train::load_config(q.config, q.overrides);
  train::Layout layout = train::parse_layout("dp=" + std::to_string(cfg.parallel.dp == 0 ? 1 : cfg.parallel.dp) +
                                             ",zero=" + std::to_string(cfg.parallel.zero_stage) +
                                             ",tp=" + std::to_string(cfg.parallel.tp) +
                                             ",sp=" + (cfg.parallel.sequence_parallel ? "on" : "off"));
  if (!q.layout.empty()) layout = train::parse_layout(q.layout);
  return parallel::plan_table(cfg.model, layout.mesh(), layout.options(),
                              cfg.precision());
}

}  // namespace meshtrain::app
