#include "meshtrain/model/block.h"

#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

namespace {
std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer); }
}  // namespace

template <typename T>
Block<T>::Block(const ModelConfig& cfg, ParameterStore<T>& params, int64_t layer, const kernels::RopeTable* rope)
    : cfg_(cfg),
      norm1_(bind_norm(params, cfg, layer_prefix(layer) + ".input_layernorm")),
      norm2_(bind_norm(params, cfg, layer_prefix(layer) + ".post_attention_layernorm")),
      attn_(cfg, params, layer_prefix(layer) + ".self_attn", rope),
      mlp_(cfg, params, layer_prefix(layer) + ".mlp") {}

template <typename T>
Tensor Block<T>::forward(const Tensor& x, const TokenBatch& b, bool recompute, Saved* saved,
                         const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n(), d = cfg_.d_model;
  const bool layer_norm = cfg_.norm == NormKind::LayerNorm;
  Saved s;
  s.x = x;
  s.xn1 = activation<T>(alloc, {n, d});
  s.rstd1 = activation<T>(alloc, {n});
  if (layer_norm) s.mean1 = activation<T>(alloc, {n});
  norm1_.forward(x.template data<T>(), n, s.xn1.template data<T>(), layer_norm ? s.mean1.template data<T>() : nullptr,
                 s.rstd1.template data<T>());
  s.h = activation<T>(alloc, {n, d});
  s.h.copy_from(x);
  s.attn = attn_.forward(s.xn1.template data<T>(), b, s.h.template data<T>(), alloc);
  s.xn2 = activation<T>(alloc, {n, d});
  s.rstd2 = activation<T>(alloc, {n});
  if (layer_norm) s.mean2 = activation<T>(alloc, {n});
  norm2_.forward(s.h.template data<T>(), n, s.xn2.template data<T>(), layer_norm ? s.mean2.template data<T>() : nullptr,
                 s.rstd2.template data<T>());
  Tensor y = activation<T>(alloc, {n, d});
  y.copy_from(s.h);
  s.mlp = mlp_.forward(s.xn2.template data<T>(), n, y.template data<T>(), alloc);
  s.full = true;
  if (recompute) {
    s = Saved{};
    s.x = x;
  }
  *saved = std::move(s);
  return y;
}

template <typename T>
void Block<T>::backward(Saved& saved, const TokenBatch& b, Tensor& dres,
                        const std::shared_ptr<CachingAllocator>& alloc) const {
  if (!saved.full) forward(saved.x, b, /*recompute=*/false, &saved, alloc);  // replay (S3)
  const Saved& s = saved;
  const int64_t n = b.n(), d = cfg_.d_model;
  Tensor dxn = activation<T>(alloc, {n, d}, MemCategory::Workspace);
  mlp_.backward(s.xn2.template data<T>(), s.mlp, n, dres.template data<T>(), dxn.template data<T>(), alloc);
  norm2_.backward(s.h.template data<T>(), s.mean2.defined() ? s.mean2.template data<T>() : nullptr,
                  s.rstd2.template data<T>(), dxn.template data<T>(), n, dres.template data<T>());
  attn_.backward(s.xn1.template data<T>(), s.attn, b, dres.template data<T>(), dxn.template data<T>(), alloc);
  norm1_.backward(s.x.template data<T>(), s.mean1.defined() ? s.mean1.template data<T>() : nullptr,
                  s.rstd1.template data<T>(), dxn.template data<T>(), n, dres.template data<T>());
}

template class Block<float>;
template class Block<double>;

}  // namespace meshtrain::model
