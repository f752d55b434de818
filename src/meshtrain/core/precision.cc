#include "meshtrain/core/precision.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

PrecisionPolicy PrecisionPolicy::uniform(DType t) { return {t, t, t, t, t, t}; }

PrecisionPolicy PrecisionPolicy::from_name(const std::string& name) {
  if (name == "fp32") return uniform(DType::F32);
  MT_THROW(ConfigError, "training.precision = \"", name,
           "\": only \"fp32\" trains so far (bf16 and fp16 policies need mixed-precision kernels and loss scaling)");
}

bool PrecisionPolicy::is_uniform() const { return *this == uniform(params); }

void PrecisionPolicy::validate() const {
  // The kernels and the engine run one floating type end to end today; the
  // fields stay separate so mixed policies are a kernel change, not an API one.
  MT_REQUIRE(ConfigError, is_uniform() && (params == DType::F32 || params == DType::F64),
             "precision policy (", describe(), ") is not supported: every field must be f32 (or f64 for checks)");
}

std::string PrecisionPolicy::describe() const {
  auto n = [](DType t) { return std::string(dtype_name(t)); };
  return "params " + n(params) + ", compute " + n(compute) + ", grad accumulate " + n(grad_accum) +
         ", grad reduce " + n(grad_reduce) + ", master " + n(master) +
         (has_master_copy() ? "" : " (the parameters)") + ", optimizer state " + n(optimizer);
}

}  // namespace meshtrain
