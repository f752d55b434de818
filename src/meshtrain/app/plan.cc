#include "meshtrain/app/plan.h"

#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::app {

std::string plan(const PlanRequest& q) {
  train::TrainConfig cfg = train::load_config(q.config, q.overrides);
  const parallel::ParallelConfig& p = cfg.parallel;
  train::Layout layout = train::parse_layout(
      "dp=" + std::to_string(p.dp == 0 ? 1 : p.dp) + ",zero=" + std::to_string(p.zero_stage) +
      ",tp=" + std::to_string(p.tp) + ",sp=" + (p.sequence_parallel ? "on" : "off") + ",pp=" + std::to_string(p.pp) +
      ",schedule=" + p.schedule + ",v=" + std::to_string(p.virtual_stages));
  if (!q.layout.empty()) layout = train::parse_layout(q.layout);
  cfg = train::with_layout(cfg, layout);
  // The options a run of this layout uses: pipeline chunks from the cost
  // model (or parallel.pp_layers) and the schedule's placement.
  parallel::LayoutOptions options = train::layout_options(cfg);
  options.sequence_parallel = layout.sequence_parallel;
  const PrecisionPolicy precision = cfg.precision();
  std::string out = parallel::plan_table(cfg.model, layout.mesh(), options, precision);
  if (layout.pp > 1)
    out += "\n" + parallel::pipeline_table(cfg.parallel, cfg.model, train::micro_batch_shape(cfg),
                                           cfg.training.grad_accum, precision.params);
  return out;
}

}  // namespace meshtrain::app
