#include "meshtrain/optim/adamw.h"

#include <cmath>


namespace meshtrain::optim {

template <typename T>
AdamW<T>::AdamW(const OptimizerConfig& cfg, const std::vector<int64_t>& moment_numel, const std::vector<Slice>& slices,
                const std::shared_ptr<CachingAllocator>& alloc)
    : cfg_(cfg) {
  for (int64_t n : moment_numel) {
    m_.push_back(Tensor::zeros(Shape{n}, dtype_of<T>, alloc, MemCategory::Optimizer));
    v_.push_back(Tensor::zeros(Shape{n}, dtype_of<T>, alloc, MemCategory::Optimizer));
  }
  for (const Slice& s : slices) {
    MT_CHECK(s.moment_offset + s.n <= moment_numel[size_t(s.unit)], "slice outside unit ", s.unit, " moments");
    segments_.push_back({s.param, s.grad, m_[s.unit].template data<T>() + s.moment_offset,
                         v_[s.unit].template data<T>() + s.moment_offset, s.n, s.decay});
  }
}


template <typename T>
void AdamW<T>::step(double lr, double grad_scale) {
  ++steps_;
  kernels::AdamWHyper h;
  h.lr = lr;
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.step = steps_;
  for (const auto& s : segments_) {
    h.weight_decay = s.decay ? cfg_.weight_decay : 0.0;
    kernels::adamw_step<T>(s.param, s.grad, s.m, s.v, s.n, h, T(grad_scale));
  }
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0;
  return norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace meshtrain::optim
