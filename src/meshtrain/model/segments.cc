#include "meshtrain/model/segments.h"

#include <algorithm>

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

HeadSegment::HeadSegment(const ModelConfig& cfg, ParameterStore& params, const TpRegions& tp, int64_t chunk_rows)
    : cfg_(cfg),
      op_(params.precision().compute),
      acc_(params.precision().accumulate()),
      norm_(bind_norm(params, cfg, "model.norm")),
      tp_(tp),
      chunk_rows_(chunk_rows) {
  MT_CHECK(chunk_rows >= 0, "head chunk of ", chunk_rows, " rows");
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
  if (chunk_rows_ > 0 && !mode.logits) {
    // A canonical block of tokens is one leaf of the weight gradient's tree,
    // which row chunks would split (train_config.cc refuses the pair).
    MT_CHECK(b.token_blocks == 0 && tp_.canonical_blocks() == 0, "the LM head in row chunks under reproducible mode");
    if (!mode.backward) {
      st.loss = chunked_loss(k, b, st.xf, 0.0, Tensor(), alloc);
      return Tensor();
    }
    st.loss_in_backward = true;
    st.loss_coeff = mode.loss_coeff;
    return Tensor();
  }
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
  if (st.loss_in_backward) {
    st.loss = chunked_loss(k, b, st.xf, st.loss_coeff, dxf, alloc);
  } else {
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

kernels::CrossEntropyResult HeadSegment::chunked_loss(const kernels::KernelTable& k, const TokenBatch& b,
                                                      const Tensor& xf, double grad_scale, const Tensor& dxf,
                                                      const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = xf.dim(0);
  const VocabSlice v = vocab_slice(*head_.weight->spec);
  kernels::CrossEntropyResult total;
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows_) {
    const int64_t r1 = std::min(n, r0 + chunk_rows_);
    const Tensor x = xf.slice(r0, r1);
    const Tensor logits = activation(alloc, acc_, {r1 - r0, head_.out}, MemCategory::Workspace);
    head_.forward(k, x, logits);
    // Each row's loss and dlogits are the whole micro-batch's (a row's
    // softmax reads only its row); dlogits in place of the logits.
    const kernels::CrossEntropyResult part = vocab_parallel_cross_entropy(
        k, tp_, logits, b.targets + r0, v, grad_scale, dxf.defined() ? logits : Tensor(), alloc);
    total.loss_sum += part.loss_sum;
    total.count += part.count;
    if (!dxf.defined()) continue;
    const Tensor dlogits = as_operand(k, logits, op_, alloc, MemCategory::Workspace);
    // The weight gradient's sum over rows goes chunk by chunk; the GEMM sums
    // k in blocks from 0, so chunks of whole blocks keep its bits (docs/math.md,
    // "The LM head in row chunks", (M.77)). The input gradient's rows are the same.
    head_.backward_weight(k, x, dlogits);
    canonical_gemm_sum(k, {{dlogits, head_.weight, false}}, tp_.canonical_blocks(), dxf.slice(r0, r1), alloc);
  }
  return total;
}

}  // namespace meshtrain::model
