// AdamW over pieces of flat parameter units. The optimizer owns only its
// moments (per unit, laid out like the unit's owned range) and its step
// count; which elements it updates comes from the sharding plan as segments
// (offset ranges with their weight-decay flag) and the parameter and
// gradient tensors are passed at each step, so it never holds pointers that
// a re-binding could leave dangling.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/optim/optimizer_config.h"

namespace meshtrain::optim {

// Elements [offset, offset + n) of unit `unit`'s owned range, all of one
// parameter (so weight decay is per parameter).
struct OptSegment {
  int unit = 0;
  int64_t offset = 0, n = 0;
  bool decay = true;
};

class AdamW {
 public:
  // Moments of moment_numel[u] elements per unit, in `dtype` (the precision
  // policy's optimizer state).
  AdamW(const OptimizerConfig& cfg, const std::vector<int64_t>& moment_numel, DType dtype,
        const std::shared_ptr<CachingAllocator>& alloc);
  // One update with learning rate `lr` of every segment; params[u] and
  // grads[u] hold unit u's owned range. Gradients are multiplied by
  // grad_scale (the clip coefficient) on the fly. compute_copies, when not
  // empty, hold each unit's owned range in the compute dtype (params[u]
  // being its f32 master): the updated values are converted into them in
  // the same pass.
  void step(double lr, double grad_scale, const std::vector<OptSegment>& segments, const std::vector<Tensor>& params,
            const std::vector<Tensor>& grads, const std::vector<Tensor>& compute_copies = {});
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t s) { steps_ = s; }
  Tensor& m(int unit) { return m_[size_t(unit)]; }
  Tensor& v(int unit) { return v_[size_t(unit)]; }

 private:
  OptimizerConfig cfg_;
  std::vector<Tensor> m_, v_;
  int64_t steps_ = 0;
};

// min(1, max_norm / (norm + 1e-6)); 1 when max_norm is 0 (clipping off).
double clip_coefficient(double norm, double max_norm);

}  // namespace meshtrain::optim
