#include "meshtrain/model/mlp_layer.h"

#include "meshtrain/kernels/cpu/activation.h"
#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

template <typename T>
Mlp<T>::Mlp(const ModelConfig& cfg, ParameterStore<T>& params, const std::string& prefix) : cfg_(cfg) {
  if (cfg.mlp == MlpKind::SwiGLU) {
    in_a_ = bind_linear(params, prefix + ".gate_proj", cfg.bias);
    in_b_ = bind_linear(params, prefix + ".up_proj", cfg.bias);
    out_ = bind_linear(params, prefix + ".down_proj", cfg.bias);
  } else {
    in_a_ = bind_linear(params, prefix + ".fc_in", cfg.bias);
    out_ = bind_linear(params, prefix + ".fc_out", cfg.bias);
  }
}

template <typename T>
typename Mlp<T>::Saved Mlp<T>::forward(const T* xn, int64_t n, T* y,
                                       const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t h = cfg_.ffn_hidden;
  Saved s;
  s.a = activation<T>(alloc, {n, h});
  s.act = activation<T>(alloc, {n, h});
  in_a_.forward(xn, n, s.a.template data<T>());
  if (cfg_.mlp == MlpKind::SwiGLU) {
    s.b = activation<T>(alloc, {n, h});
    in_b_.forward(xn, n, s.b.template data<T>());
    kernels::swiglu_forward<T>(s.a.template data<T>(), s.b.template data<T>(), n * h, s.act.template data<T>());
  } else {
    kernels::gelu_forward<T>(s.a.template data<T>(), n * h, s.act.template data<T>());
  }
  out_.forward(s.act.template data<T>(), n, y, /*accumulate_y=*/true);
  return s;
}

template <typename T>
void Mlp<T>::backward(const T* xn, const Saved& s, int64_t n, const T* dy, T* dxn,
                      const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t h = cfg_.ffn_hidden;
  Tensor dact = activation<T>(alloc, {n, h}, MemCategory::Workspace);
  out_.backward(s.act.template data<T>(), dy, n, dact.template data<T>(), false);
  Tensor da = activation<T>(alloc, {n, h}, MemCategory::Workspace);
  if (cfg_.mlp == MlpKind::SwiGLU) {
    Tensor db = activation<T>(alloc, {n, h}, MemCategory::Workspace);
    kernels::swiglu_backward<T>(s.a.template data<T>(), s.b.template data<T>(), dact.template data<T>(), n * h,
                                da.template data<T>(), db.template data<T>());
    in_a_.backward(xn, da.template data<T>(), n, dxn, false);
    in_b_.backward(xn, db.template data<T>(), n, dxn, true);
  } else {
    kernels::gelu_backward<T>(s.a.template data<T>(), dact.template data<T>(), n * h, da.template data<T>());
    in_a_.backward(xn, da.template data<T>(), n, dxn, false);
  }
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace meshtrain::model
