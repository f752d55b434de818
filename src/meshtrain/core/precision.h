// The precision policy: every place a training step keeps or moves numbers has
// its own element type (docs/math.md, "Rule: precision is reported per role":
// input storage, multiply, accumulate, output and optimizer state are separate
// choices), so no class stands for all of them with one template parameter.
#pragma once

#include <string>

#include "meshtrain/core/dtype.h"

namespace meshtrain {

struct PrecisionPolicy {
  DType params = DType::F32;       // parameters as layers read them (matmul weights)
  DType compute = DType::F32;      // activations where they enter a matmul; norm statistics, softmax
                                   // state, the residual stream and losses are always f32 (or f64)
  DType grad_accum = DType::F32;   // gradients summed over a window's micro-batches
  DType grad_reduce = DType::F32;  // gradients on the wire (data-parallel collectives)
  DType master = DType::F32;       // the weights the optimizer updates
  DType optimizer = DType::F32;    // Adam moments

  // Everything in one type: fp32 training, f64 (gradient checks).
  static PrecisionPolicy uniform(DType t);
  // 16-bit matmuls (bf16 or f16 weights and matmul inputs, f32 accumulate
  // and outputs) with f32 gradients, f32 master weights and f32 Adam
  // moments; gradients reduced in `reduce` (f32 or the 16-bit type).
  static PrecisionPolicy mixed(DType half, DType reduce = DType::F32);
  // training.precision: "fp32" | "bf16" | "fp16" | "fp64" with
  // training.grad_reduce_dtype "fp32" | "bf16" | "fp16" (16-bit only; left
  // at "fp32", gradients are reduced in the uniform type); ConfigError
  // naming the key otherwise. fp64 is f64 everywhere: slow (the kernels'
  // scalar double paths), for equivalence checks whose rounding must not
  // hide a real difference (docs/reproducibility.md).
  static PrecisionPolicy from_name(const std::string& name, const std::string& grad_reduce = "fp32");
  // The dtype of AMP-style training that needs loss scaling (f16's range).
  bool needs_loss_scaling() const { return params == DType::F16; }
  bool is_uniform() const;
  // Where matmuls accumulate and what they output; also the type of the
  // residual stream, norm statistics, softmax state and losses: f32 under
  // the 16-bit policies, else the uniform type.
  DType accumulate() const { return params == DType::BF16 || params == DType::F16 ? DType::F32 : params; }
  // Master weights distinct from the parameters the layers read.
  bool has_master_copy() const { return master != params; }
  // Throws ConfigError for a combination the kernels and engine cannot run.
  void validate() const;
  // "params f32, matmul inputs f32, accumulate f32, outputs f32, grads f32, grad reduce f32,
  //  master f32 (the parameters), optimizer state f32" (docs/math.md, "Rule: precision is reported per role")
  std::string describe() const;
  bool operator==(const PrecisionPolicy&) const = default;
};

}  // namespace meshtrain
