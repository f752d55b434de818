#include "meshtrain/model/attention_layer.h"

#include <cmath>

#include "meshtrain/model/canonical_sum.h"
#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

namespace {
constexpr std::string_view kLayer = "self-attention";
}  // namespace

SelfAttention::SelfAttention(const ModelConfig& cfg, ParameterStore& params, const std::string& prefix,
                             const kernels::RopeTable* rope, const RingAttention* ring, int canonical_blocks,
                             comm::ProcessGroup* kv_share)
    : head_dim_(cfg.head_dim),
      op_(params.precision().compute),
      acc_(params.precision().accumulate()),
      // Column-parallel projections into row-parallel output (docs/math.md (M.34)-(M.35)).
      q_proj_(bind_linear(params, prefix + ".q_proj", cfg.bias, TpStyle::Column, kLayer)),
      k_proj_(bind_linear(params, prefix + ".k_proj", cfg.bias, TpStyle::Column, kLayer)),
      v_proj_(bind_linear(params, prefix + ".v_proj", cfg.bias, TpStyle::Column, kLayer)),
      o_proj_(bind_linear(params, prefix + ".o_proj", false, TpStyle::Row, kLayer)),  // its bias: the block's
      q_heads_(q_proj_.out / cfg.head_dim),
      kv_heads_(k_proj_.out / cfg.head_dim),
      group_(cfg.n_heads / cfg.n_kv_heads),
      rope_(rope),
      ring_(ring && ring->active() ? ring : nullptr),
      cp_(ring ? ring->group() : nullptr),
      canonical_blocks_(canonical_blocks),
      kv_share_(kv_share) {}

kernels::AttentionShape SelfAttention::shape(const TokenBatch& b) const {
  return {b.rows, b.seq, q_heads_, kv_heads_, head_dim_};
}

double SelfAttention::scale() const { return 1.0 / std::sqrt(double(head_dim_)); }

SelfAttention::Saved SelfAttention::forward(const kernels::KernelTable& k, const GatheredRows& xn, const TokenBatch& b,
                                            const Tensor& y, const Tensor& base,
                                            const std::shared_ptr<CachingAllocator>& alloc,
                                            const ProjectOutput& project) const {
  const int64_t n = b.n();
  const DType dt = acc_;
  // Under the bf16 policy attention's inputs (q, k, v after RoPE) and its
  // output are bf16 values (docs/math.md (M.80)): stored as bf16 where the
  // plain kernel reads them, rounded in place where a path runs in f32.
  const bool bf16_values = op_ == DType::BF16 && acc_ == DType::F32;
  const DType in = bf16_values && b.token_blocks == 0 && !ring_ ? DType::BF16 : dt;
  const MemCategory projected = in == dt ? MemCategory::Activations : MemCategory::Workspace;
  Tensor q = activation(alloc, dt, {n, q_proj_.out}, projected), kk = activation(alloc, dt, {n, k_proj_.out}, projected),
         v = activation(alloc, dt, {n, v_proj_.out}, projected);
  xn.for_row_blocks([&](const Tensor& x, int64_t r0) {
    const int64_t r1 = r0 + x.dim(0);
    q_proj_.forward(k, x, q.slice(r0, r1));
    k_proj_.forward(k, x, kk.slice(r0, r1));
    v_proj_.forward(k, x, v.slice(r0, r1));
  });
  if (rope_) {
    k.rope(q, b.positions, q_heads_, head_dim_, *rope_, false);
    k.rope(kk, b.positions, kv_heads_, head_dim_, *rope_, false);
  }
  Saved s;
  auto input = [&](const Tensor& x) {  // x as attention reads it
    if (in != dt) return as_operand(k, x, in, alloc);
    if (bf16_values) round_to_bf16(k, x, alloc);
    return x;
  };
  s.q = input(q);
  s.k = input(kk);
  s.v = input(v);
  s.out = activation(alloc, in, {n, q_proj_.out});
  s.lse = activation(alloc, dt, {b.rows, q_heads_, b.seq});
  if (b.token_blocks > 0)  // docs/math.md (M.74)
    chunk_pair_attention_forward(k, chunk_pairs(b), shape(b), s.q, s.k, s.v, scale(), s.out, s.lse, alloc);
  else if (ring_)
    ring_->forward(shape(b), s.q, s.k, s.v, b.chunk_segments, scale(), s.out, s.lse, alloc);
  else
    k.attention_forward(shape(b), s.q, s.k, s.v, b.segments, scale(), s.out, s.lse);
  s.out_op = as_operand(k, s.out, op_, alloc);
  if (in == dt && bf16_values) k.convert(s.out, s.out_op);  // the f32 path's output holds its operand's values
  if (project)
    project(s.out_op, o_proj_.weight->value);
  else
    canonical_gemm_sum(k, {{s.out_op, o_proj_.weight, true}}, canonical_blocks_, y, alloc, base);  // docs/math.md (M.73)
  return s;
}

void SelfAttention::canonical_backward(const kernels::KernelTable& k, const Saved& s, const TokenBatch& b,
                                       const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                       const std::shared_ptr<CachingAllocator>& alloc) const {
  if (group_ == 1) {
    chunk_pair_attention_backward(k, chunk_pairs(b), shape(b), s.q, s.k, s.v, scale(), s.out, s.lse, dout, dq, dk, dv,
                                  alloc);
    return;
  }
  // Per query head, then each KV head's tree over its query heads (docs/math.md (M.76)).
  kernels::AttentionShape per_query = shape(b);
  per_query.kv_grads_per_query = true;
  const int64_t n = b.n();
  const Tensor dk_q = activation(alloc, dk.dtype(), {n, q_proj_.out}, MemCategory::Workspace),
               dv_q = activation(alloc, dv.dtype(), {n, q_proj_.out}, MemCategory::Workspace);
  chunk_pair_attention_backward(k, chunk_pairs(b), per_query, s.q, s.k, s.v, scale(), s.out, s.lse, dout, dq, dk_q,
                                dv_q, alloc);
  sum_query_heads(k, dk_q, dk, head_dim_, kv_share_, alloc);
  sum_query_heads(k, dv_q, dv, head_dim_, kv_share_, alloc);
}

void SelfAttention::backward(const kernels::KernelTable& k, const Tensor& xn, const Saved& s, const TokenBatch& b,
                             const GatheredRows& dy, bool dy_changes, const Tensor& dxn, WeightGrads& wg,
                             const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n();
  const DType dt = dy.full.dtype();
  Tensor dout = activation(alloc, dt, {n, q_proj_.out}, MemCategory::Workspace);
  const Tensor dy_op = dy.for_operand_blocks(k, op_, alloc, MemCategory::Activations, [&](const Tensor& rows, int64_t r0) {
    o_proj_.backward_input(k, rows, dout.slice(r0, r0 + rows.dim(0)), false);
  });
  wg.linear(k, o_proj_, s.out_op, dy_op, dy_changes && dy_op.shares_storage(dy.full));
  // Deferred weight grads keep dq, dk, dv: they are activations then.
  const MemCategory grads_cat = wg.deferred() ? MemCategory::Activations : MemCategory::Workspace;
  Tensor dq = activation(alloc, dt, {n, q_proj_.out}, grads_cat);
  Tensor dk = activation(alloc, dt, {n, k_proj_.out}, grads_cat);
  Tensor dv = activation(alloc, dt, {n, v_proj_.out}, grads_cat);
  if (b.token_blocks > 0)
    canonical_backward(k, s, b, dout, dq, dk, dv, alloc);
  else if (ring_)
    ring_->backward(shape(b), s.q, s.k, s.v, b.chunk_segments, scale(), s.out, s.lse, dout, dq, dk, dv, alloc);
  else
    k.attention_backward(shape(b), s.q, s.k, s.v, b.segments, scale(), s.out, s.lse, dout, dq, dk, dv);
  if (rope_) {
    k.rope(dq, b.positions, q_heads_, head_dim_, *rope_, true);
    k.rope(dk, b.positions, kv_heads_, head_dim_, *rope_, true);
  }
  // The projections' output gradients as operands (copies under 16 bits).
  const Tensor dq_op = as_operand(k, dq, op_, alloc, grads_cat), dk_op = as_operand(k, dk, op_, alloc, grads_cat),
               dv_op = as_operand(k, dv, op_, alloc, grads_cat);
  wg.linears(k, {&q_proj_, &k_proj_, &v_proj_}, xn, {dq_op, dk_op, dv_op}, false);  // one pass over xn
  // q's, k's and v's products added in that order (block j: their slices j,
  // the blocks in the tree under canonical blocks, docs/math.md (M.73)).
  canonical_gemm_sum(k, {{dq_op, q_proj_.weight, false}, {dk_op, k_proj_.weight, false}, {dv_op, v_proj_.weight, false}},
                     canonical_blocks_, dxn, alloc);
}

}  // namespace meshtrain::model
