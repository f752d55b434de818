#include "meshtrain/plan/step_inputs.h"

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
}

}  // namespace meshtrain::plan
