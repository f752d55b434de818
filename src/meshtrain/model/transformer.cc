#include "meshtrain/model/transformer.h"

#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/embedding.h"
#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

namespace {
ModelConfig finalized(ModelConfig cfg) {
  cfg.finalize();
  return cfg;
}
}  // namespace

template <typename T>
Transformer<T>::Transformer(const ModelConfig& cfg, std::shared_ptr<CachingAllocator> alloc, ExecOptions exec)
    : cfg_(finalized(cfg)),
      alloc_(std::move(alloc)),
      exec_(exec),
      params_(build_model_spec(cfg_), alloc_, exec.materialize_params) {
  params_.initialize(cfg_.seed);
  if (cfg_.positions == PositionKind::Rope) rope_ = kernels::make_rope_table(cfg_.max_seq_len, cfg_.head_dim, cfg_.rope_theta);
  const kernels::RopeTable* rope = cfg_.positions == PositionKind::Rope ? &rope_ : nullptr;
  blocks_.reserve(size_t(cfg_.n_layers));
  for (int64_t l = 0; l < cfg_.n_layers; ++l) blocks_.emplace_back(cfg_, params_, l, rope);
  final_norm_ = bind_norm(params_, cfg_, "model.norm");
  tok_emb_ = &params_.find("model.embed_tokens.weight");
  if (cfg_.positions == PositionKind::Learned) pos_emb_ = &params_.find("model.embed_positions.weight");
  if (cfg_.tied_embeddings) {
    head_.weight = tok_emb_;
    head_.out = cfg_.vocab_size;
    head_.in = cfg_.d_model;
  } else {
    head_ = bind_linear(params_, "lm_head", false);
  }
}

template <typename T>
void Transformer<T>::check_batch(const TokenBatch& b) const {
  MT_REQUIRE(DataError, b.seq <= cfg_.max_seq_len, "batch sequence length ", b.seq, " exceeds model.max_seq_len = ",
             cfg_.max_seq_len);
  for (int64_t i = 0; i < b.n(); ++i)
    MT_REQUIRE(DataError, b.positions[i] >= 0 && b.positions[i] < cfg_.max_seq_len, "position id ", b.positions[i],
               " at flat index ", i, " outside [0, model.max_seq_len = ", cfg_.max_seq_len, ")");
}

template <typename T>
Tensor Transformer<T>::embed(const TokenBatch& b) {
  const int64_t n = b.n(), d = cfg_.d_model;
  call(hooks_.before_forward, 0);
  Tensor x = activation<T>(alloc_, {n, d});
  kernels::embedding_forward<T>(b.tokens, n, tok_emb_->value.template data<T>(), cfg_.vocab_size, d,
                                x.template data<T>());
  if (pos_emb_) {
    Tensor p = activation<T>(alloc_, {n, d}, MemCategory::Workspace);
    kernels::embedding_forward<T>(b.positions, n, pos_emb_->value.template data<T>(), cfg_.max_seq_len, d,
                                  p.template data<T>());
    kernels::add_inplace<T>(x.template data<T>(), p.template data<T>(), n * d);
  }
  call(hooks_.after_forward, 0);
  return x;
}

template <typename T>
typename Transformer<T>::Forward Transformer<T>::run_trunk(const TokenBatch& b, bool keep_saved) {
  check_batch(b);
  const int64_t n = b.n(), d = cfg_.d_model;
  Forward f;
  f.blocks.resize(blocks_.size());
  Tensor x = embed(b);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    call(hooks_.before_forward, int(l) + 1);
    typename Block<T>::Saved s;
    x = blocks_[l].forward(x, b, exec_.recompute || !keep_saved, &s, alloc_);
    if (keep_saved) f.blocks[l] = std::move(s);
    call(hooks_.after_forward, int(l) + 1);
  }
  const int final_unit = int(blocks_.size()) + 1;
  call(hooks_.before_forward, final_unit);
  f.x_final = x;
  f.xf = activation<T>(alloc_, {n, d});
  f.rstd_f = activation<T>(alloc_, {n});
  if (cfg_.norm == NormKind::LayerNorm) f.mean_f = activation<T>(alloc_, {n});
  final_norm_.forward(x.template data<T>(), n, f.xf.template data<T>(),
                      f.mean_f.defined() ? f.mean_f.template data<T>() : nullptr, f.rstd_f.template data<T>());
  return f;
}

template <typename T>
Tensor Transformer<T>::head_logits(const Forward& f, int64_t n) {
  Tensor logits = activation<T>(alloc_, {n, cfg_.vocab_size});
  if (cfg_.tied_embeddings) call(hooks_.before_forward, 0);
  head_.forward(f.xf.template data<T>(), n, logits.template data<T>());
  return logits;
}

template <typename T>
kernels::CrossEntropyResult Transformer<T>::forward_loss(const TokenBatch& b) {
  Forward f = run_trunk(b, /*keep_saved=*/false);
  Tensor logits = head_logits(f, b.n());
  call(hooks_.after_forward, int(blocks_.size()) + 1);
  return kernels::cross_entropy_forward<T>(logits.template data<T>(), b.targets, b.n(), cfg_.vocab_size);
}

template <typename T>
Tensor Transformer<T>::forward_logits(const TokenBatch& b) {
  Forward f = run_trunk(b, /*keep_saved=*/false);
  Tensor logits = head_logits(f, b.n());
  call(hooks_.after_forward, int(blocks_.size()) + 1);
  return logits;
}

template <typename T>
kernels::CrossEntropyResult Transformer<T>::forward_backward(const TokenBatch& b, T loss_coeff) {
  const int64_t n = b.n(), d = cfg_.d_model;
  const int final_unit = int(blocks_.size()) + 1;
  Forward f = run_trunk(b, /*keep_saved=*/true);
  Tensor logits = head_logits(f, n);
  // Loss and dlogits in one pass, in place: the logits are not needed again.
  const auto ce = kernels::cross_entropy_forward_backward<T>(logits.template data<T>(), b.targets, n,
                                                             cfg_.vocab_size, loss_coeff, logits.template data<T>());
  call(hooks_.after_forward, final_unit);

  call(hooks_.before_backward, final_unit);
  if (cfg_.tied_embeddings) call(hooks_.before_backward, 0);  // the head is the embedding
  Tensor dxf = activation<T>(alloc_, {n, d}, MemCategory::Workspace);
  head_.backward(f.xf.template data<T>(), logits.template data<T>(), n, dxf.template data<T>(), false);
  logits = Tensor();
  Tensor dres = activation<T>(alloc_, {n, d});
  dres.zero_();
  final_norm_.backward(f.x_final.template data<T>(), f.mean_f.defined() ? f.mean_f.template data<T>() : nullptr,
                       f.rstd_f.template data<T>(), dxf.template data<T>(), n, dres.template data<T>());
  // With tied embeddings the head's grads live in the embed unit, which is
  // reported ready only after the embedding backward below.
  call(hooks_.grads_ready, final_unit);
  dxf = Tensor();
  f.xf = Tensor();
  for (size_t l = blocks_.size(); l-- > 0;) {
    call(hooks_.before_backward, int(l) + 1);
    blocks_[l].backward(f.blocks[l], b, dres, alloc_);
    f.blocks[l] = typename Block<T>::Saved{};  // release activations as we go
    call(hooks_.grads_ready, int(l) + 1);
  }
  call(hooks_.before_backward, 0);
  kernels::embedding_backward<T>(b.tokens, n, dres.template data<T>(), cfg_.vocab_size, d,
                                 tok_emb_->grad.template data<T>());
  if (pos_emb_)
    kernels::embedding_backward<T>(b.positions, n, dres.template data<T>(), cfg_.max_seq_len, d,
                                   pos_emb_->grad.template data<T>());
  call(hooks_.grads_ready, 0);
  return ce;
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace meshtrain::model
