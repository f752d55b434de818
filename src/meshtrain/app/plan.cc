#include "meshtrain/app/plan.h"

#include <optional>

#include "meshtrain/plan/mesh_search.h"
#include "meshtrain/plan/plan_report.h"
#include "meshtrain/plan/published_runs.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/meta_step.h"
#include "meshtrain/train/plan_inputs.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::app {

namespace {

// A layout given with --devices must use exactly those devices.
void check_devices(const train::Layout& layout, const PlanRequest& q) {
  const comm::MeshShape m = layout.mesh();
  MT_REQUIRE(ConfigError, q.devices == 0 || m.world_size() == q.devices, "--layout ", q.layout, ": pp*dp*cp*tp = ",
             m.pp, "*", m.dp, "*", m.cp, "*", m.tp, " = ", m.world_size(), " devices but --devices is ", q.devices);
}

// docs/math.md's closed forms ((M.26)-(M.28), (M.30), (M.42)-(M.43), (M.68)) for --params and friends.
std::string seed_report(const PlanRequest& q, const std::optional<plan::HardwareProfile>& hw) {
  MT_REQUIRE(ConfigError, q.devices == 0 || !q.layout.empty(),
             "--devices without --layout lists meshes for a model: give a CONFIG");
  plan::SeedTerms seed = q.seed;
  if (!q.layout.empty()) {
    const train::Layout layout = train::parse_layout(q.layout);
    check_devices(layout, q);
    seed.dp = layout.dp, seed.zero_stage = layout.zero_stage, seed.tp = layout.tp, seed.pp = layout.pp;
  }
  if (hw && !seed.device_memory) seed.device_memory = hw->memory_bytes;
  return plan::seed_terms_report(seed);
}

}  // namespace

std::string plan(const PlanRequest& q) {
  MT_REQUIRE(ConfigError, q.nodes == 0 || (!q.config.empty() && q.published.empty()), "--nodes ", q.nodes,
             " splits a CONFIG's layouts over nodes: give a CONFIG (not --published or the closed forms)");
  std::optional<plan::HardwareProfile> hw;
  if (!q.hardware.empty()) hw = plan::load_hardware(q.hardware);
  const plan::HardwareProfile* profile = hw ? &*hw : nullptr;
  if (!q.published.empty()) {
    MT_REQUIRE(ConfigError, hw.has_value(), "--published ", q.published,
               " needs --hardware FILE (the machine to model)");
    return plan::render_published(plan::published_runs(q.published), *hw, train::meta_step_recorder());
  }
  if (q.config.empty()) return seed_report(q, hw);

  train::TrainConfig cfg = train::load_config(q.config, q.overrides);
  const parallel::ParallelConfig& p = cfg.parallel;
  train::Layout layout = train::parse_layout(
      "dp=" + std::to_string(p.dp == 0 ? 1 : p.dp) + ",zero=" + std::to_string(p.zero_stage) +
      ",tp=" + std::to_string(p.tp) + ",sp=" + (p.sequence_parallel ? "on" : "off") + ",pp=" + std::to_string(p.pp) +
      ",schedule=" + p.schedule + ",v=" + std::to_string(p.virtual_stages));
  if (!q.layout.empty()) {
    layout = train::parse_layout(q.layout);
    check_devices(layout, q);
  }
  if (q.devices > 0 && q.layout.empty()) {
    plan::StepInputs base = train::step_inputs(cfg);
    base.nodes = q.nodes;
    MT_REQUIRE(ConfigError, q.devices % std::max(1, q.nodes) == 0, "--nodes ", q.nodes, ": ", q.devices,
               " devices do not split evenly over ", q.nodes, " nodes");
    const auto candidates = plan::search_meshes(base, q.devices, profile, train::meta_step_recorder());
    return plan::render_search(candidates, q.devices, profile);
  }
  cfg = train::with_layout(cfg, layout);
  plan::StepInputs inputs = train::step_inputs(cfg, layout);
  inputs.nodes = q.nodes;
  const plan::Prediction prediction = plan::predict(inputs, train::meta_step_recorder(), profile);
  if (q.json) return plan::render_json(prediction).dump(2) + "\n";
  // The options a run of this layout uses: pipeline chunks from the cost
  // model (or parallel.pp_layers) and the schedule's placement.
  const parallel::LayoutOptions options = train::layout_options(cfg);
  const PrecisionPolicy precision = cfg.precision();
  std::string out = parallel::plan_table(cfg.model, layout.mesh(), options, precision);
  if (layout.pp > 1)
    out.append("\n").append(parallel::pipeline_table(cfg.parallel, cfg.model, train::micro_batch_shape(cfg),
                                                   cfg.training.grad_accum, precision.params));
  return out + "\n" + plan::render_text(prediction);
}

}  // namespace meshtrain::app
