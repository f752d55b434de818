#include "meshtrain/model/segments.h"

#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

EmbeddingSegment::EmbeddingSegment(const ModelConfig& cfg, ParameterStore& params)
    : d_(cfg.d_model), acc_(params.precision().accumulate()), tokens_(&params.find("model.embed_tokens.weight")) {
  if (cfg.positions == PositionKind::Learned) positions_ = &params.find("model.embed_positions.weight");
}

Tensor EmbeddingSegment::forward(const kernels::KernelTable& k, const TokenBatch& b,
                                 const std::shared_ptr<CachingAllocator>& alloc) const {
  const DType dt = acc_;
  Tensor x = activation(alloc, dt, {b.n(), d_});
  k.embedding_forward(b.tokens, tokens_->value, x);
  if (positions_) {
    Tensor p = activation(alloc, dt, {b.n(), d_}, MemCategory::Workspace);
    k.embedding_forward(b.positions, positions_->value, p);
    k.add(x, p);
  }
  return x;
}

void EmbeddingSegment::backward(const kernels::KernelTable& k, const TokenBatch& b, const Tensor& dx,
                                WeightGrads& wg) const {
  wg.embedding(k, *tokens_, b.tokens, dx, false);
  if (positions_) wg.embedding(k, *positions_, b.positions, dx, false);
}

HeadSegment::HeadSegment(const ModelConfig& cfg, ParameterStore& params)
    : cfg_(cfg),
      op_(params.precision().compute),
      acc_(params.precision().accumulate()),
      norm_(bind_norm(params, cfg, "model.norm")) {
  if (cfg.tied_embeddings) {
    head_.weight = &params.find("model.embed_tokens.weight");
    head_.out = head_.weight->spec->shape[0];
    head_.in = head_.weight->spec->shape[1];
  } else {
    head_ = bind_linear(params, "lm_head", false);
  }
}

Tensor HeadSegment::forward(const kernels::KernelTable& k, const TokenBatch& b, const Tensor& x, SegmentState& st,
                            const ForwardMode& mode, const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n();
  const DType dt = acc_;
  st.x_final = x;
  Tensor xf = activation(alloc, dt, {n, cfg_.d_model});
  st.final_stats = norm_.forward(k, x, xf, alloc);
  st.xf = as_operand(k, xf, op_, alloc);
  Tensor logits = activation(alloc, dt, {n, head_.out});
  head_.forward(k, st.xf, logits);
  if (mode.logits) return logits;
  if (!mode.backward) {
    st.loss = k.cross_entropy(logits, b.targets);
    return Tensor();
  }
  // Loss and dlogits in one pass, in place: the logits are not needed again.
  st.loss = k.cross_entropy_backward(logits, b.targets, mode.loss_coeff, logits);
  st.dlogits = logits;
  return Tensor();
}

Tensor HeadSegment::backward(const kernels::KernelTable& k, const TokenBatch& b, SegmentState& st,
                             const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = b.n(), d = cfg_.d_model;
  Tensor dxf = activation(alloc, acc_, {n, d}, MemCategory::Workspace);
  const Tensor dlogits = as_operand(k, st.dlogits, op_, alloc);
  st.weights.linear(k, head_, st.xf, dlogits, false);
  head_.backward_input(k, dlogits, dxf, false);
  st.dlogits = Tensor();  // a deferred weight job keeps its own reference
  Tensor dres = activation(alloc, dxf.dtype(), {n, d});
  k.fill(dres, 0.0);
  norm_.backward(k, st.x_final, st.final_stats, dxf, dres);
  st.xf = Tensor();
  return dres;
}

}  // namespace meshtrain::model
