#include "meshtrain/model/mlp_layer.h"

#include "meshtrain/model/canonical_sum.h"
#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

namespace {
constexpr std::string_view kLayer = "the feed-forward";
}  // namespace

Mlp::Mlp(const ModelConfig& cfg, ParameterStore& params, const std::string& prefix, int canonical_blocks)
    : swiglu_(cfg.mlp == MlpKind::SwiGLU),
      op_(params.precision().compute),
      acc_(params.precision().accumulate()),
      canonical_blocks_(canonical_blocks) {
  if (swiglu_) {
    // Gate and up on the same hidden indices: the product stays local (docs/math.md (M.35)).
    in_a_ = bind_linear(params, prefix + ".gate_proj", cfg.bias, TpStyle::Column, kLayer);
    in_b_ = bind_linear(params, prefix + ".up_proj", cfg.bias, TpStyle::Column, kLayer);
    out_ = bind_linear(params, prefix + ".down_proj", false, TpStyle::Row, kLayer);  // bias: the block's
  } else {
    in_a_ = bind_linear(params, prefix + ".fc_in", cfg.bias, TpStyle::Column, kLayer);
    out_ = bind_linear(params, prefix + ".fc_out", false, TpStyle::Row, kLayer);
  }
}

Mlp::Saved Mlp::forward(const kernels::KernelTable& k, const Tensor& xn, const Tensor& y, const Tensor& base,
                        const std::shared_ptr<CachingAllocator>& alloc, const ProjectOutput& project) const {
  const int64_t n = xn.dim(0), h = in_a_.out;
  const DType dt = acc_;
  Saved s;
  s.a = activation(alloc, dt, {n, h});
  Tensor act = activation(alloc, written_operand_dtype(op_, dt), {n, h});
  in_a_.forward(k, xn, s.a);
  if (swiglu_) {
    s.b = activation(alloc, dt, {n, h});
    in_b_.forward(k, xn, s.b);
    k.swiglu_forward(s.a, s.b, act);
  } else {
    k.gelu_forward(s.a, act);
  }
  s.act = as_operand(k, act, op_, alloc);
  if (project)
    project(s.act, out_.weight->value);
  else
    canonical_gemm_sum(k, {{s.act, out_.weight, true}}, canonical_blocks_, y, alloc, base);  // docs/math.md (M.73)
  return s;
}

void Mlp::backward(const kernels::KernelTable& k, const Tensor& xn, const Saved& s, const Tensor& dy,
                   bool dy_changes, const Tensor& dxn, WeightGrads& wg,
                   const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = xn.dim(0), h = in_a_.out;
  const DType dt = acc_;
  const Tensor dy_op = as_operand(k, dy, op_, alloc);
  wg.linear(k, out_, s.act, dy_op, dy_changes && dy_op.shares_storage(dy));
  Tensor dact = activation(alloc, dt, {n, h}, MemCategory::Workspace);
  out_.backward_input(k, dy_op, dact, false);
  // Deferred weight grads keep da, db: they are activations then.
  const MemCategory grads_cat = wg.deferred() ? MemCategory::Activations : MemCategory::Workspace;
  const DType grad_dt = written_operand_dtype(op_, dt);
  Tensor da = activation(alloc, grad_dt, {n, h}, grads_cat);
  if (swiglu_) {
    Tensor db = activation(alloc, grad_dt, {n, h}, grads_cat);
    k.swiglu_backward(s.a, s.b, dact, da, db);
    const Tensor da_op = as_operand(k, da, op_, alloc, grads_cat), db_op = as_operand(k, db, op_, alloc, grads_cat);
    wg.linears(k, {&in_a_, &in_b_}, xn, {da_op, db_op}, false);  // one pass over xn
    canonical_gemm_sum(k, {{da_op, in_a_.weight, false}, {db_op, in_b_.weight, false}}, canonical_blocks_, dxn, alloc);
  } else {
    k.gelu_backward(s.a, dact, da);
    const Tensor da_op = as_operand(k, da, op_, alloc, grads_cat);
    wg.linear(k, in_a_, xn, da_op, false);
    canonical_gemm_sum(k, {{da_op, in_a_.weight, false}}, canonical_blocks_, dxn, alloc);
  }
}

}  // namespace meshtrain::model
