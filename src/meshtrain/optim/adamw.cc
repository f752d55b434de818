#include "meshtrain/optim/adamw.h"

#include <cmath>

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::optim {

AdamW::AdamW(const OptimizerConfig& cfg, const std::vector<int64_t>& moment_numel, DType dtype,
             const std::shared_ptr<CachingAllocator>& alloc)
    : cfg_(cfg) {
  for (int64_t n : moment_numel) {
    m_.push_back(Tensor::zeros(Shape{n}, dtype, alloc, MemCategory::Optimizer));
    v_.push_back(Tensor::zeros(Shape{n}, dtype, alloc, MemCategory::Optimizer));
  }
}

void AdamW::step(double lr, double grad_scale, const std::vector<OptSegment>& segments,
                 const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& compute_copies) {
  ++steps_;
  kernels::AdamWHyper h;
  h.lr = lr;
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.step = steps_;
  for (const OptSegment& s : segments) {
    const size_t u = size_t(s.unit);
    MT_CHECK(s.offset + s.n <= m_[u].numel(), "segment outside unit ", s.unit, "'s moments");
    h.weight_decay = s.decay ? cfg_.weight_decay : 0.0;
    const Tensor& p = params[u];
    auto slice = [&](const Tensor& t) { return t.flat_slice(s.offset, s.offset + s.n); };
    const Tensor copy = compute_copies.empty() ? Tensor() : slice(compute_copies[u]);
    kernels::kernels_for(p).adamw(slice(p), slice(grads[u]), slice(m_[u]), slice(v_[u]), h, grad_scale, copy);
  }
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0;
  return norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

}  // namespace meshtrain::optim
