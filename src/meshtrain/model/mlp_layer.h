// Feed-forward: SwiGLU (gate/up/down, Llama) or GELU (fc_in/fc_out, GPT-2).
// Gate and up are column-parallel on the same hidden indices, so the product is
// local; the output projection is row-parallel (docs/math.md (M.35)), without
// its bias (the block adds it once, after the tensor-parallel reduction).
#pragma once

#include <memory>

#include "meshtrain/model/layers.h"
#include "meshtrain/model/token_batch.h"

namespace meshtrain::model {

class Mlp {
 public:
  struct Saved {
    Tensor a, b;  // SwiGLU: gate, up. GELU: pre-activation, (unused)
    Tensor act;   // input of the output projection [n, hidden], as its operand
  };

  // canonical_blocks: reproducible mode's blocks of the sums over hidden
  // units (canonical_sum.h; 0: one GEMM each).
  Mlp(const ModelConfig& cfg, ParameterStore& params, const std::string& prefix, int canonical_blocks = 0);
  // xn is the input projections' operand (the policy's matmul type).
  // y = mlp(xn) + base when base is defined (the fused residual add; base
  // may be y), else y = mlp(xn). With `project`, the output projection is
  // the caller's (y and base unused).
  Saved forward(const kernels::KernelTable& k, const GatheredRows& xn, const Tensor& y, const Tensor& base,
                const std::shared_ptr<CachingAllocator>& alloc, const ProjectOutput& project = {}) const;
  // B: dxn = d mlp / d xn . dy (overwrites); weight grads go to `wg`.
  void backward(const kernels::KernelTable& k, const Tensor& xn, const Saved& s, const GatheredRows& dy, bool dy_changes,
                const Tensor& dxn, WeightGrads& wg, const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  bool swiglu_;
  DType op_, acc_;  // matmul operand type, accumulate/output type
  Linear in_a_, in_b_, out_;  // SwiGLU: gate, up, down. GELU: fc_in, -, fc_out
  int canonical_blocks_;
};

}  // namespace meshtrain::model
