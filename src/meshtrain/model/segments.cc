#include "meshtrain/model/segments.h"

#include "meshtrain/model/canonical_sum.h"
#include "meshtrain/model/linear_init.h"
#include "meshtrain/model/vocab_parallel.h"

namespace meshtrain::model {

EmbeddingSegment::EmbeddingSegment(const ModelConfig& cfg, ParameterStore& params, const TpRegions& tp)
    : d_(cfg.d_model),
      acc_(params.precision().accumulate()),
      tokens_(&bind_styled(params, "model.embed_tokens.weight", TpStyle::Vocab, "the embedding")),
      tp_(tp) {
  if (cfg.positions == PositionKind::Learned)
    positions_ = &bind_styled(params, "model.embed_positions.weight", TpStyle::Replicate, "the embedding");
}

Tensor EmbeddingSegment::forward(const kernels::KernelTable& k, const TokenBatch& b,
                                 const std::shared_ptr<CachingAllocator>& alloc) const {
  const DType dt = acc_;
  const int64_t n = b.n(), nl = tp_.local_rows(n);
  const VocabSlice v = vocab_slice(*tokens_->spec);
  Tensor part = activation(alloc, dt, {n, d_}, tp_.shards_rows() ? MemCategory::Workspace : MemCategory::Activations);
  k.embedding_slice_forward(b.tokens, tokens_->value, v.begin, v.total, part);
  Tensor x = tp_.row_output(part, alloc, MemCategory::Activations);
  if (positions_) {
    Tensor p = activation(alloc, dt, {nl, d_}, MemCategory::Workspace);
    k.embedding_forward(b.positions + tp_.first_row(n), positions_->value, p);
    k.add(x, p);
  }
  return x;
}

void EmbeddingSegment::backward(const kernels::KernelTable& k, const TokenBatch& b, const Tensor& dx, WeightGrads& wg,
                                const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n();
  const MemCategory kept = wg.deferred() ? MemCategory::Activations : MemCategory::Workspace;
  wg.embedding(k, *tokens_, b.tokens, tp_.row_output_grad(dx, n, alloc, kept), false, vocab_slice(*tokens_->spec).begin);
  if (positions_ && tp_.canonical_blocks() > 0)  // over canonical token blocks (docs/math.md (M.73))
    canonical_embedding_grad(k, *positions_, b.positions + tp_.first_row(n), dx, tp_, b, alloc);
  else if (positions_)
    wg.embedding(k, *positions_, b.positions + tp_.first_row(n), dx, false);
}

HeadSegment::HeadSegment(const ModelConfig& cfg, ParameterStore& params, const TpRegions& tp)
    : cfg_(cfg),
      op_(params.precision().compute),
      acc_(params.precision().accumulate()),
      norm_(bind_norm(params, cfg, "model.norm")),
      tp_(tp) {
  if (cfg.tied_embeddings) {
    head_.weight = &bind_styled(params, "model.embed_tokens.weight", TpStyle::Vocab, "the LM head");
    head_.out = head_.weight->spec->shape[0];
    head_.in = head_.weight->spec->shape[1];
  } else {
    head_ = bind_linear(params, "lm_head", false, TpStyle::Vocab, "the LM head");
  }
}

Tensor HeadSegment::forward(const kernels::KernelTable& k, const TokenBatch& b, const Tensor& x, SegmentState& st,
                            const ForwardMode& mode, const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n(), nl = tp_.local_rows(n);
  const DType dt = acc_;
  const MemCategory normed = tp_.shards_rows() ? MemCategory::Workspace : MemCategory::Activations;
  st.x_final = x;
  Tensor xf = activation(alloc, written_operand_dtype(op_, dt), {nl, cfg_.d_model}, normed);
  st.final_stats = norm_.forward(k, x, xf, alloc);
  st.xf = tp_.column_input(as_operand(k, xf, op_, alloc, normed), n, alloc, MemCategory::Activations);
  Tensor logits = activation(alloc, dt, {n, head_.out});
  head_.forward(k, st.xf, logits);
  if (mode.logits) return logits;
  const VocabSlice v = vocab_slice(*head_.weight->spec);
  if (!mode.backward) {
    st.loss = vocab_parallel_cross_entropy(k, tp_, logits, b.targets, v, 0.0, Tensor(), alloc, b.token_blocks);
    return Tensor();
  }
  // Loss and dlogits in place: the logits are not needed again.
  st.loss = vocab_parallel_cross_entropy(k, tp_, logits, b.targets, v, mode.loss_coeff, logits, alloc,
                                         b.token_blocks);
  st.dlogits = logits;
  return Tensor();
}

Tensor HeadSegment::backward(const kernels::KernelTable& k, const TokenBatch& b, SegmentState& st,
                             const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n(), nl = tp_.local_rows(n), d = cfg_.d_model;
  Tensor dxf = activation(alloc, acc_, {n, d}, MemCategory::Workspace);
  {
    const Tensor dlogits = as_operand(k, st.dlogits, op_, alloc);
    st.weights.linear(k, head_, st.xf, dlogits, false);
    // Partial: this rank's vocabulary columns (their canonical blocks in the tree, docs/math.md (M.73)).
    canonical_gemm_sum(k, {{dlogits, head_.weight, false}}, tp_.canonical_blocks(), dxf, alloc);
  }
  // The logits are freed here, before the stream's gradient is allocated (a
  // deferred weight job keeps its own reference).
  st.dlogits = Tensor();
  const Tensor dxf_mine = tp_.column_input_grad(dxf, alloc);
  Tensor dres = activation(alloc, dxf.dtype(), {nl, d});
  k.fill(dres, 0.0);
  if (tp_.canonical_blocks() > 0)  // over canonical token blocks (docs/math.md (M.73))
    canonical_norm_backward(k, norm_, st.x_final, st.final_stats, dxf_mine, dres, tp_, b, alloc);
  else
    norm_.backward(k, st.x_final, st.final_stats, dxf_mine, dres);
  st.xf = Tensor();
  return dres;
}

}  // namespace meshtrain::model
