#include "meshtrain/core/precision.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

DType reduce_dtype(const std::string& name) {
  if (name == "fp32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "fp16") return DType::F16;
  MT_THROW(ConfigError, "training.grad_reduce_dtype = \"", name, "\": expected fp32, bf16 or fp16");
}

}  // namespace

PrecisionPolicy PrecisionPolicy::uniform(DType t) { return {t, t, t, t, t, t}; }

PrecisionPolicy PrecisionPolicy::mixed(DType half, DType reduce) {
  return {half, half, DType::F32, reduce, DType::F32, DType::F32};
}

PrecisionPolicy PrecisionPolicy::from_name(const std::string& name, const std::string& grad_reduce) {
  const DType reduce = reduce_dtype(grad_reduce);
  if (name == "fp32" || name == "fp64") {
    // The key's default ("fp32") reads as "the gradients' own type" here.
    MT_REQUIRE(ConfigError, reduce == DType::F32, "training.grad_reduce_dtype = \"", grad_reduce,
               "\" needs a 16-bit training.precision (gradients are ", name == "fp32" ? "f32" : "f64", " under ",
               name, ")");
    return uniform(name == "fp32" ? DType::F32 : DType::F64);
  }
  if (name == "bf16" || name == "fp16") {
    const DType half = name == "bf16" ? DType::BF16 : DType::F16;
    MT_REQUIRE(ConfigError, reduce == DType::F32 || reduce == half, "training.grad_reduce_dtype = \"", grad_reduce,
               "\" with training.precision = \"", name, "\": reduce in fp32 or in ", name);
    return mixed(half, reduce);
  }
  MT_THROW(ConfigError, "training.precision = \"", name, "\": expected fp32, bf16, fp16 or fp64");
}

bool PrecisionPolicy::is_uniform() const { return *this == uniform(params); }

void PrecisionPolicy::validate() const {
  const bool uniform_ok = is_uniform() && (params == DType::F32 || params == DType::F64);
  const bool half = params == DType::BF16 || params == DType::F16;
  const bool mixed_ok = half && compute == params && grad_accum == DType::F32 && master == DType::F32 &&
                        optimizer == DType::F32 && (grad_reduce == DType::F32 || grad_reduce == params);
  MT_REQUIRE(ConfigError, uniform_ok || mixed_ok, "precision policy (", describe(),
             ") is not supported: f32 (or f64) everywhere, or bf16/f16 weights and matmul inputs with f32 "
             "gradients, master weights and optimizer state");
}

std::string PrecisionPolicy::describe() const {
  auto n = [](DType t) { return std::string(dtype_name(t)); };
  const std::string acc = n(accumulate());
  return "params " + n(params) + ", matmul inputs " + n(compute) + ", accumulate " + acc + ", outputs " + acc +
         ", grads " + n(grad_accum) + ", grad reduce " + n(grad_reduce) + ", master " + n(master) +
         (has_master_copy() ? "" : " (the parameters)") + ", optimizer state " + n(optimizer);
}

}  // namespace meshtrain
