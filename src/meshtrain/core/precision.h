// The precision policy: every place a training step keeps or moves numbers
// has its own element type (SPEC S3: input storage, multiply, accumulate,
// output and optimizer state are separate choices), so no class stands for
// all of them with one template parameter.
#pragma once

#include <string>

#include "meshtrain/core/dtype.h"

namespace meshtrain {

struct PrecisionPolicy {
  DType params = DType::F32;       // parameters as layers read them (matmul inputs)
  DType compute = DType::F32;      // activations between kernels
  DType grad_accum = DType::F32;   // gradients summed over a window's micro-batches
  DType grad_reduce = DType::F32;  // gradients on the wire (data-parallel collectives)
  DType master = DType::F32;       // the weights the optimizer updates
  DType optimizer = DType::F32;    // Adam moments

  // Everything in one type: fp32 (today's training), f64 (gradient checks).
  static PrecisionPolicy uniform(DType t);
  // "fp32" (the only training preset so far); ConfigError naming the key otherwise.
  static PrecisionPolicy from_name(const std::string& name);
  bool is_uniform() const;
  // Master weights distinct from the parameters the layers read.
  bool has_master_copy() const { return master != params; }
  // Throws ConfigError for a combination the kernels and engine cannot run.
  void validate() const;
  // "params f32, compute f32, grad accumulate f32, grad reduce f32, master f32 (the parameters), optimizer state f32"
  std::string describe() const;
  bool operator==(const PrecisionPolicy&) const = default;
};

}  // namespace meshtrain
