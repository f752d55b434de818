#include "meshtrain/model/block.h"

#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

namespace {
std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer); }
}  // namespace

Block::Block(const ModelConfig& cfg, ParameterStore& params, int64_t layer, const kernels::RopeTable* rope,
             comm::ProcessGroup* tp, bool fuse_residual)
    : cfg_(cfg),
      norm1_(bind_norm(params, cfg, layer_prefix(layer) + ".input_layernorm")),
      norm2_(bind_norm(params, cfg, layer_prefix(layer) + ".post_attention_layernorm")),
      attn_(cfg, params, layer_prefix(layer) + ".self_attn", rope),
      mlp_(cfg, params, layer_prefix(layer) + ".mlp"),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      fuse_(fuse_residual && tp_ == nullptr),
      op_(params.precision().compute) {}

void Block::sum_over_tp(const Tensor& t) const {
  if (tp_) tp_->all_reduce(t);
}

Tensor Block::forward(const kernels::KernelTable& k, const Tensor& x, const TokenBatch& b, bool recompute,
                      Saved* saved, const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n(), d = cfg_.d_model;
  const DType dt = x.dtype();
  Saved s;
  s.x = x;
  Tensor xn1 = activation(alloc, dt, {n, d});
  s.stats1 = norm1_.forward(k, x, xn1, alloc);
  s.xn1 = as_operand(k, xn1, op_, alloc);
  s.h = activation(alloc, dt, {n, d});
  k.copy(s.h, x);
  if (fuse_) {
    s.attn = attn_.forward(k, s.xn1, b, s.h, /*accumulate_y=*/true, alloc);
  } else {
    Tensor part = activation(alloc, dt, {n, d}, MemCategory::Workspace);
    s.attn = attn_.forward(k, s.xn1, b, part, /*accumulate_y=*/false, alloc);
    sum_over_tp(part);  // (29.12): partial sums meet before the residual
    k.add(s.h, part);
  }
  Tensor xn2 = activation(alloc, dt, {n, d});
  s.stats2 = norm2_.forward(k, s.h, xn2, alloc);
  s.xn2 = as_operand(k, xn2, op_, alloc);
  Tensor y = activation(alloc, dt, {n, d});
  k.copy(y, s.h);
  if (fuse_) {
    s.mlp = mlp_.forward(k, s.xn2, y, /*accumulate_y=*/true, alloc);
  } else {
    Tensor part = activation(alloc, dt, {n, d}, MemCategory::Workspace);
    s.mlp = mlp_.forward(k, s.xn2, part, /*accumulate_y=*/false, alloc);
    sum_over_tp(part);
    k.add(y, part);
  }
  s.full = true;
  if (recompute) {
    s = Saved{};
    s.x = x;
  }
  *saved = std::move(s);
  return y;
}

void Block::backward(const kernels::KernelTable& k, Saved& saved, const TokenBatch& b, Tensor& dres,
                     WeightGrads& wg, const std::shared_ptr<CachingAllocator>& alloc) const {
  if (!saved.full) forward(k, saved.x, b, /*recompute=*/false, &saved, alloc);  // replay (S3)
  const Saved& s = saved;
  const int64_t n = b.n(), d = cfg_.d_model;
  Tensor dxn = activation(alloc, dres.dtype(), {n, d}, MemCategory::Workspace);
  // dres is updated in place by the norm backward below: deferred weight
  // grads of the output projections keep a copy of it.
  mlp_.backward(k, s.xn2, s.mlp, dres, /*dy_changes=*/true, dxn, wg, alloc);
  sum_over_tp(dxn);  // column-parallel input gradients are partial (S6)
  norm2_.backward(k, s.h, s.stats2, dxn, dres);
  attn_.backward(k, s.xn1, s.attn, b, dres, /*dy_changes=*/true, dxn, wg, alloc);
  sum_over_tp(dxn);
  norm1_.backward(k, s.x, s.stats1, dxn, dres);
}

}  // namespace meshtrain::model
