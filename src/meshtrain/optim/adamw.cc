#include "meshtrain/optim/adamw.h"

#include <cmath>

#include "meshtrain/kernels/cpu/elementwise.h"

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

namespace {
template <typename T>
std::vector<int64_t> unit_sizes(model::ParameterStore<T>& params) {
  std::vector<int64_t> n;
  for (int u = 0; u < params.num_units(); ++u) n.push_back(params.spec().units[u].numel);
  return n;
}
template <typename T>
std::vector<typename AdamW<T>::Slice> all_params(model::ParameterStore<T>& params) {
  std::vector<typename AdamW<T>::Slice> slices;
  for (int i = 0; i < params.size(); ++i) {
    model::Parameter& p = params.get(i);
    slices.push_back({p.value.template data<T>(), p.grad.template data<T>(), p.spec->unit, p.spec->unit_offset,
                      p.spec->numel(), p.spec->weight_decay});
  }
  return slices;
}
}  // namespace

template <typename T>
AdamW<T>::AdamW(model::ParameterStore<T>& params, const OptimizerConfig& cfg,
                const std::shared_ptr<CachingAllocator>& alloc)
    : AdamW(cfg, unit_sizes(params), all_params(params), alloc) {}

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

template <typename T>
double grad_sum_squares(model::ParameterStore<T>& params) {
  double total = 0;
  for (int i = 0; i < params.size(); ++i) {
    const Tensor& g = params.get(i).grad;
    total += kernels::sum_squares<T>(g.template data<T>(), g.numel());
  }
  return total;
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0;
  return norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

template class AdamW<float>;
template class AdamW<double>;
template double grad_sum_squares<float>(model::ParameterStore<float>&);
template double grad_sum_squares<double>(model::ParameterStore<double>&);

}  // namespace meshtrain::optim
