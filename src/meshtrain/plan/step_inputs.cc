#include "meshtrain/plan/step_inputs.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

void StepInputs::validate() const {
  MT_REQUIRE(ConfigError, micro_batch >= 1, "training.micro_batch = ", micro_batch, ": must be >= 1");
  MT_REQUIRE(ConfigError, grad_accum >= 1, "training.grad_accum = ", grad_accum, ": must be >= 1");
  MT_REQUIRE(ConfigError, seq_len >= 1, "data.seq_len = ", seq_len, ": must be >= 1");
  MT_REQUIRE(ConfigError, mesh.pp >= 1 && mesh.dp >= 1 && mesh.cp >= 1 && mesh.tp >= 1, "layout ", mesh.str(),
             ": every axis needs at least one rank");
  MT_REQUIRE(ConfigError, layout.zero_stage >= 0 && layout.zero_stage <= 3, "zero stage ", layout.zero_stage,
             ": expected 0, 1, 2 or 3");
  mesh.validate(mesh.world_size());
  MT_REQUIRE(ConfigError, nodes >= 0 && (nodes == 0 || mesh.world_size() % nodes == 0), "--nodes ", nodes, ": the ",
             mesh.world_size(), " ranks of ", mesh.str(), " do not split evenly over ", nodes,
             " nodes (give a node count dividing the devices)");
  // Before any schedule of pp stages is built and validated (quadratic in pp).
  const int64_t chunks = int64_t(mesh.pp) * std::max(1, layout.virtual_stages);
  MT_REQUIRE(ConfigError, chunks <= model.n_layers, "pipeline of pp = ", mesh.pp, " x v = ", layout.virtual_stages,
             " = ", chunks, " chunks but model.n_layers = ", model.n_layers, ": every chunk needs at least one block");
}

WindowSplit split_window(int64_t rows, int replicas, int64_t micro_batch) {
  MT_REQUIRE(ConfigError, replicas >= 1 && rows % replicas == 0, "a global batch of ", rows, " rows does not split over ",
             replicas, " data-parallel replicas");
  const int64_t per_replica = rows / replicas;
  for (int64_t b = std::min(micro_batch, per_replica); b >= 1; --b)
    if (per_replica % b == 0) return {b, per_replica / b};
  return {1, per_replica};
}

}  // namespace meshtrain::plan
