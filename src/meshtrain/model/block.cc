#include "meshtrain/model/block.h"

#include "meshtrain/model/canonical_sum.h"
#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

namespace {
std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer); }
}  // namespace

Block::Block(const ModelConfig& cfg, ParameterStore& params, int64_t layer, const kernels::RopeTable* rope,
             const TpRegions& tp, bool fuse_residual, const RingAttention* ring, MoeLayerStats* moe_stats,
             comm::ProcessGroup* ep, comm::ProcessGroup* kv_share)
    : cfg_(cfg),
      norm1_(bind_norm(params, cfg, layer_prefix(layer) + ".input_layernorm")),
      norm2_(bind_norm(params, cfg, layer_prefix(layer) + ".post_attention_layernorm")),
      attn_(cfg, params, layer_prefix(layer) + ".self_attn", rope, ring, tp.canonical_blocks(), kv_share),
      moe_stats_(moe_stats),
      tp_(tp),
      // The residual joins after the reduction where there is one: a group, or canonical blocks (M.73).
      fuse_(fuse_residual && tp.size() == 1 && tp.canonical_blocks() == 0),
      op_(params.precision().compute) {
  const std::string p = layer_prefix(layer);
  if (cfg.is_moe_layer(layer))
    moe_ = std::make_unique<MoeLayer>(cfg, params, p + ".mlp", ep);
  else
    mlp_ = std::make_unique<Mlp>(cfg, params, p + ".mlp", tp.canonical_blocks());
  if (cfg.bias) {
    attn_bias_ = &params.find(p + ".self_attn.o_proj.bias");
    if (mlp_) mlp_bias_ = &params.find(p + (cfg.mlp == MlpKind::SwiGLU ? ".mlp.down_proj.bias" : ".mlp.fc_out.bias"));
  }
}

template <typename Project>
void Block::add_branch(const kernels::KernelTable& k, const Tensor& base, const Tensor& stream, int64_t n,
                       const Parameter* bias, bool dense, const std::shared_ptr<CachingAllocator>& alloc,
                       Project&& project) const {
  if (fuse_) {
    project(stream, base, ProjectOutput());
  } else if (dense && tp_.overlaps()) {
    // The output projection in row pieces, each piece's sum behind the next
    // piece's GEMM (docs/math.md (M.79)).
    TpRegions::PendingRows sum;
    project(Tensor(), Tensor(), [&](const Tensor& x, const Tensor& w) {
      sum = tp_.start_row_output(n, cfg_.d_model, stream.dtype(), alloc, MemCategory::Workspace,
                                 [&](const Tensor& rows, int64_t first) {
                                   k.gemm(false, true, 1.0, x.slice(first, first + rows.dim(0)), w, 0.0, rows);
                                 });
    });
    MT_CHECK(sum.rows.defined(), "a dense sublayer did not run the output projection it was handed");
    k.copy(stream, base);
    k.add(stream, tp_.finish(sum));
  } else {
    Tensor part = activation(alloc, stream.dtype(), {n, cfg_.d_model}, MemCategory::Workspace);
    project(part, Tensor(), ProjectOutput());
    k.copy(stream, base);
    k.add(stream, tp_.row_output(part, alloc));  // docs/math.md (M.35): partial sums meet before the residual
  }
  if (bias) k.add_row_bias(stream, bias->value);
}

GatheredRows Block::arriving(TpRegions::PendingRows& gather, const Tensor& local, int64_t n) const {
  if (gather.pieces.empty()) return GatheredRows(gather.rows);
  return GatheredRows(gather.rows, local, tp_.first_row(n), [this, &gather] { tp_.finish(gather); });
}

Tensor Block::forward(const kernels::KernelTable& k, const Tensor& x, const TokenBatch& b, bool recompute,
                      Saved* saved, const std::shared_ptr<CachingAllocator>& alloc, double loss_coeff,
                      bool record) const {
  const int64_t n = b.n(), nl = tp_.local_rows(n), d = cfg_.d_model;
  MT_CHECK(x.dim(0) == nl, "block input of ", x.dim(0), " rows, expected ", nl);
  const DType dt = x.dtype();
  // Under SP the normed rows are gathered (as matmul operands: 16 bits under
  // the mixed policies): the gathered copy is what is kept.
  const MemCategory normed = tp_.shards_rows() ? MemCategory::Workspace : MemCategory::Activations;
  Saved s;
  s.x = x;
  s.loss_coeff = loss_coeff;
  const DType normed_dt = written_operand_dtype(op_, dt);  // the norms write the operand itself
  Tensor xn1 = activation(alloc, normed_dt, {nl, d}, normed);
  s.stats1 = norm1_.forward(k, x, xn1, alloc);
  const Tensor xn1_op = as_operand(k, xn1, op_, alloc, normed);
  TpRegions::PendingRows gather1 = tp_.start_column_input(xn1_op, n, alloc, MemCategory::Activations);
  s.xn1 = gather1.rows;
  s.h = activation(alloc, dt, {nl, d});
  add_branch(k, x, s.h, n, attn_bias_, /*dense=*/true, alloc,
             [&](const Tensor& out, const Tensor& base, const ProjectOutput& output) {
               s.attn = attn_.forward(k, arriving(gather1, xn1_op, n), b, out, base, alloc, output);
             });
  MT_CHECK(gather1.pieces.empty(), "self-attention did not wait for its gathered input");
  Tensor xn2 = activation(alloc, normed_dt, {nl, d}, normed);
  s.stats2 = norm2_.forward(k, s.h, xn2, alloc);
  const Tensor xn2_op = as_operand(k, xn2, op_, alloc, normed);
  TpRegions::PendingRows gather2 = tp_.start_column_input(xn2_op, n, alloc, MemCategory::Activations);
  s.xn2 = gather2.rows;
  Tensor y = activation(alloc, dt, {nl, d});
  add_branch(k, s.h, y, n, mlp_bias_, /*dense=*/moe_ == nullptr, alloc,
             [&](const Tensor& out, const Tensor& base, const ProjectOutput& output) {
               if (moe_)
                 s.moe = moe_->forward(k, arriving(gather2, xn2_op, n).arrived(), b.seq, out, base,
                                       record ? moe_stats_ : nullptr, alloc);  // reads every row
               else
                 s.mlp = mlp_->forward(k, arriving(gather2, xn2_op, n), out, base, alloc, output);
             });
  MT_CHECK(gather2.pieces.empty(), "the feed-forward did not wait for its gathered input");
  s.full = true;
  if (recompute) {
    s = Saved{};
    s.x = x;
    s.loss_coeff = loss_coeff;
  }
  *saved = std::move(s);
  return y;
}

void Block::backward(const kernels::KernelTable& k, Saved& saved, const TokenBatch& b, Tensor& dres,
                     WeightGrads& wg, const std::shared_ptr<CachingAllocator>& alloc) const {
  // Replay the forward first (docs/math.md, "Rule: recomputed functions replay exactly").
  if (!saved.full) forward(k, saved.x, b, /*recompute=*/false, &saved, alloc, saved.loss_coeff);
  const Saved& s = saved;
  const int64_t n = b.n(), d = cfg_.d_model;
  // A deferred weight gradient keeps the gathered output gradient.
  const MemCategory kept = wg.deferred() ? MemCategory::Activations : MemCategory::Workspace;
  Tensor dxn = activation(alloc, dres.dtype(), {n, d}, MemCategory::Workspace);
  // Each sublayer: the output gradient of the whole stream (gathered under
  // SP; else dres itself, which the norm backward below updates in place, so
  // deferred weight jobs keep a copy), the branch's partial input gradient
  // summed over the group, then the norm.
  // Reproducible mode sums the replicated weights' gradients over canonical
  // token blocks (docs/math.md (M.73)); its schedules never defer them.
  const bool canonical = tp_.canonical_blocks() > 0;
  MT_CHECK(!canonical || !wg.deferred(), "canonical token sums with deferred weight gradients");
  auto sublayer = [&](Parameter* bias, auto&& branch_backward, const Norm& norm, const Tensor& norm_in,
                      const Norm::Stats& stats) {
    if (bias && canonical)
      canonical_bias_grad(k, *bias, dres, tp_, b, alloc);
    else if (bias)
      wg.bias(k, *bias, dres, /*dy_changes=*/true);
    // Under SP the output gradient's other rows arrive while this rank's
    // are used (M.81); the weight gradients run while the input gradient's
    // sum is in flight (M.78), and dres changes only after they ran.
    TpRegions::PendingRows gather = tp_.start_row_output_grad(dres, n, alloc, kept);
    const bool overlap = tp_.overlaps() && !wg.deferred();
    if (overlap) wg.hold();
    branch_backward(arriving(gather, dres, n), /*dy_changes=*/!overlap && gather.rows.raw() == dres.raw());
    MT_CHECK(gather.pieces.empty(), "a sublayer's backward did not wait for its gathered output gradient");
    TpRegions::PendingRows sum = tp_.start_column_input_grad(dxn, alloc);
    wg.release(k);
    const Tensor dnorm = tp_.finish(sum);
    if (canonical)
      canonical_norm_backward(k, norm, norm_in, stats, dnorm, dres, tp_, b, alloc);
    else
      norm.backward(k, norm_in, stats, dnorm, dres);
  };
  sublayer(mlp_bias_, [&](const GatheredRows& dy, bool changes) {
    if (moe_) {
      moe_->backward(k, s.xn2, s.moe, dy.arrived(), changes, dxn, s.loss_coeff, wg, alloc);  // reads every row
    } else {
      mlp_->backward(k, s.xn2, s.mlp, dy, changes, dxn, wg, alloc);
    }
  }, norm2_, s.h, s.stats2);
  sublayer(attn_bias_, [&](const GatheredRows& dy, bool changes) {
    attn_.backward(k, s.xn1, s.attn, b, dy, changes, dxn, wg, alloc);
  }, norm1_, s.x, s.stats1);
}

}  // namespace meshtrain::model
