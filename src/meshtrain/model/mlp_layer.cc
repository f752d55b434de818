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

Mlp::Saved Mlp::forward(const kernels::KernelTable& k, const GatheredRows& xn, const Tensor& y, const Tensor& base,
                        const std::shared_ptr<CachingAllocator>& alloc, const ProjectOutput& project) const {
  const int64_t n = xn.full.dim(0), h = in_a_.out;
  const DType dt = acc_;
  Saved s;
  s.a = activation(alloc, dt, {n, h});
  Tensor act = activation(alloc, written_operand_dtype(op_, dt), {n, h});
  if (swiglu_) s.b = activation(alloc, dt, {n, h});
  xn.for_row_blocks([&](const Tensor& x, int64_t r0) {  // rows are independent up to the output projection
    const int64_t r1 = r0 + x.dim(0);
    const Tensor a = s.a.slice(r0, r1), act_rows = act.slice(r0, r1);
    in_a_.forward(k, x, a);
    if (swiglu_) {
      const Tensor b = s.b.slice(r0, r1);
      in_b_.forward(k, x, b);
      k.swiglu_forward(a, b, act_rows);
    } else {
      k.gelu_forward(a, act_rows);
    }
  });
  s.act = as_operand(k, act, op_, alloc);
  if (project)
    project(s.act, out_.weight->value);
  else
    canonical_gemm_sum(k, {{s.act, out_.weight, true}}, canonical_blocks_, y, alloc, base);  // docs/math.md (M.73)
  return s;
}

void Mlp::backward(const kernels::KernelTable& k, const Tensor& xn, const Saved& s, const GatheredRows& dy,
                   bool dy_changes, const Tensor& dxn, WeightGrads& wg,
                   const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = xn.dim(0), h = in_a_.out;
  const DType dt = acc_;
  Tensor dact = activation(alloc, dt, {n, h}, MemCategory::Workspace);
  const Tensor dy_op = dy.for_operand_blocks(k, op_, alloc, MemCategory::Activations, [&](const Tensor& rows, int64_t r0) {
    out_.backward_input(k, rows, dact.slice(r0, r0 + rows.dim(0)), false);
  });
  wg.linear(k, out_, s.act, dy_op, dy_changes && dy_op.shares_storage(dy.full));
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
