// AdamW over flat segments of parameters. A segment is a contiguous range of
// one parameter (so weight decay is per parameter); the unsharded optimizer
// has one segment per parameter, a ZeRO shard owns the pieces of its range.
// Moments live in flat buffers laid out like the parameter units.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/optim/optimizer_config.h"

namespace meshtrain::optim {

template <typename T>
struct OptSegment {
  T* param;
  const T* grad;
  T* m;
  T* v;
  int64_t n;
  bool decay;
};

template <typename T>
class AdamW {
 public:
  // A slice of parameter elements this rank updates; its moments live at
  // [moment_offset, moment_offset + n) of unit `unit`'s moment buffers.
  struct Slice {
    T* param;
    const T* grad;
    int unit;
    int64_t moment_offset;
    int64_t n;
    bool decay;
  };
  // General form: moment buffers of moment_numel[u] elements per unit.
  AdamW(const OptimizerConfig& cfg, const std::vector<int64_t>& moment_numel, const std::vector<Slice>& slices,
        const std::shared_ptr<CachingAllocator>& alloc);
  // One update with learning rate `lr`; grads are multiplied by grad_scale
  // (the clip coefficient) on the fly.
  void step(double lr, double grad_scale);
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t s) { steps_ = s; }
  Tensor& m(int unit) { return m_[unit]; }
  Tensor& v(int unit) { return v_[unit]; }

 private:
  OptimizerConfig cfg_;
  std::vector<Tensor> m_, v_;
  std::vector<OptSegment<T>> segments_;
  int64_t steps_ = 0;
};

// min(1, max_norm / (norm + 1e-6)); 1 when max_norm is 0 (clipping off).
double clip_coefficient(double norm, double max_norm);

}  // namespace meshtrain::optim
