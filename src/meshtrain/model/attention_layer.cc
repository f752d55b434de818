#include "meshtrain/model/attention_layer.h"

#include <cmath>

#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

template <typename T>
SelfAttention<T>::SelfAttention(const ModelConfig& cfg, ParameterStore<T>& params, const std::string& prefix,
                                const kernels::RopeTable* rope)
    : cfg_(cfg),
      q_proj_(bind_linear(params, prefix + ".q_proj", cfg.bias)),
      k_proj_(bind_linear(params, prefix + ".k_proj", cfg.bias)),
      v_proj_(bind_linear(params, prefix + ".v_proj", cfg.bias)),
      o_proj_(bind_linear(params, prefix + ".o_proj", cfg.bias)),
      rope_(rope) {}

template <typename T>
kernels::AttentionShape SelfAttention<T>::shape(const TokenBatch& b) const {
  return {b.rows, b.seq, cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim};
}

template <typename T>
typename SelfAttention<T>::Saved SelfAttention<T>::forward(const T* xn, const TokenBatch& b, T* y,
                                                           const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n();
  Saved s;
  s.q = activation<T>(alloc, {n, cfg_.q_dim()});
  s.k = activation<T>(alloc, {n, cfg_.kv_dim()});
  s.v = activation<T>(alloc, {n, cfg_.kv_dim()});
  q_proj_.forward(xn, n, s.q.template data<T>());
  k_proj_.forward(xn, n, s.k.template data<T>());
  v_proj_.forward(xn, n, s.v.template data<T>());
  if (rope_) {
    kernels::rope_apply<T>(s.q.template data<T>(), b.positions, n, cfg_.n_heads, cfg_.head_dim, *rope_, false);
    kernels::rope_apply<T>(s.k.template data<T>(), b.positions, n, cfg_.n_kv_heads, cfg_.head_dim, *rope_, false);
  }
  s.out = activation<T>(alloc, {n, cfg_.q_dim()});
  s.lse = activation<T>(alloc, {b.rows, cfg_.n_heads, b.seq});
  const T scale = T(1.0 / std::sqrt(double(cfg_.head_dim)));
  kernels::attention_forward<T>(shape(b), s.q.template data<T>(), s.k.template data<T>(), s.v.template data<T>(),
                                b.segments, scale, s.out.template data<T>(), s.lse.template data<T>());
  o_proj_.forward(s.out.template data<T>(), n, y, /*accumulate_y=*/true);
  return s;
}

template <typename T>
void SelfAttention<T>::backward(const T* xn, const Saved& s, const TokenBatch& b, const T* dy, T* dxn,
                                const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n();
  Tensor dout = activation<T>(alloc, {n, cfg_.q_dim()}, MemCategory::Workspace);
  o_proj_.backward(s.out.template data<T>(), dy, n, dout.template data<T>(), false);
  Tensor dq = activation<T>(alloc, {n, cfg_.q_dim()}, MemCategory::Workspace);
  Tensor dk = activation<T>(alloc, {n, cfg_.kv_dim()}, MemCategory::Workspace);
  Tensor dv = activation<T>(alloc, {n, cfg_.kv_dim()}, MemCategory::Workspace);
  const T scale = T(1.0 / std::sqrt(double(cfg_.head_dim)));
  kernels::attention_backward<T>(shape(b), s.q.template data<T>(), s.k.template data<T>(), s.v.template data<T>(),
                                 b.segments, scale, s.out.template data<T>(), s.lse.template data<T>(),
                                 dout.template data<T>(), dq.template data<T>(), dk.template data<T>(),
                                 dv.template data<T>());
  if (rope_) {
    kernels::rope_apply<T>(dq.template data<T>(), b.positions, n, cfg_.n_heads, cfg_.head_dim, *rope_, true);
    kernels::rope_apply<T>(dk.template data<T>(), b.positions, n, cfg_.n_kv_heads, cfg_.head_dim, *rope_, true);
  }
  q_proj_.backward(xn, dq.template data<T>(), n, dxn, false);
  k_proj_.backward(xn, dk.template data<T>(), n, dxn, true);
  v_proj_.backward(xn, dv.template data<T>(), n, dxn, true);
}

template class SelfAttention<float>;
template class SelfAttention<double>;

}  // namespace meshtrain::model
