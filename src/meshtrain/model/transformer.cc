#include "meshtrain/model/transformer.h"

#include "meshtrain/core/fault_injection.h"

namespace meshtrain::model {

namespace {
ModelConfig finalized(ModelConfig cfg) {
  cfg.finalize();
  return cfg;
}
}  // namespace

Transformer::Transformer(const ModelConfig& cfg, std::shared_ptr<CachingAllocator> alloc, ExecOptions exec,
                         ModelPartition partition, comm::ProcessGroup* tp, comm::ProcessGroup* cp,
                         comm::ProcessGroup* ep)
    : Transformer(cfg, std::move(alloc), exec, localize(build_model_spec(finalized(cfg)), finalized(cfg), partition),
                  tp, cp, ep) {}

Transformer::Transformer(const ModelConfig& cfg, std::shared_ptr<CachingAllocator> alloc, ExecOptions exec,
                         ModelSpec local, comm::ProcessGroup* tp, comm::ProcessGroup* cp, comm::ProcessGroup* ep,
                         comm::ProcessGroup* kv_share)
    : cfg_(finalized(cfg)),
      alloc_(std::move(alloc)),
      exec_(exec),
      kernels_(&kernels::kernels_for(alloc_->device())),
      params_(std::move(local), exec.precision, alloc_, exec.materialize_params) {
  const ModelPartition& partition = params_.spec().partition;
  exec_.precision.validate();
  MT_CHECK(partition.tp_size == (tp ? tp->size() : 1), "partition tp size ", partition.tp_size, " vs group ",
           tp ? tp->size() : 1);
  MT_CHECK(!tp || tp->rank() == partition.tp_rank, "partition tp rank ", partition.tp_rank, " vs group rank ",
           tp ? tp->rank() : 0);
  tp_stats_ = std::make_unique<TpCommStats>(num_segments());
  tp_ = TpRegions(tp && tp->size() > 1 ? tp : nullptr, partition.sequence_parallel, tp_stats_.get(), 0,
                  partition.canonical_blocks, alloc_, exec_.overlap_tp);
  cp_stats_ = std::make_unique<CpCommStats>();
  ring_ = std::make_unique<RingAttention>(cp && cp->size() > 1 ? cp : nullptr, cp_stats_.get());
  params_.set_poison_stale_grads(exec.poison_stale_grads);
  params_.initialize(cfg_.seed);
  if (cfg_.positions == PositionKind::Rope) rope_ = kernels::make_rope_table(cfg_.max_seq_len, cfg_.head_dim, cfg_.rope_theta);
  const kernels::RopeTable* rope = cfg_.positions == PositionKind::Rope ? &rope_ : nullptr;
  if (holds(0)) embedding_ = std::make_unique<EmbeddingSegment>(cfg_, params_, tp_.for_segment(0));
  blocks_.resize(size_t(cfg_.n_layers));
  for (int64_t l = 0; l < cfg_.n_layers; ++l)
    if (holds(int(l) + 1) && cfg_.is_moe_layer(l))
      moe_stats_.layers.push_back({l, std::vector<int64_t>(size_t(cfg_.n_experts), 0)});
  for (int64_t l = 0; l < cfg_.n_layers; ++l)
    if (holds(int(l) + 1))
      blocks_[size_t(l)] =
          std::make_unique<Block>(cfg_, params_, l, rope, tp_.for_segment(int(l) + 1), exec_.fuse_residual,
                                  ring_.get(), moe_stats_.find(l), ep, kv_share);
  if (holds(num_segments() - 1)) {
    // A tied head on another stage than the embedding reads the copy the
    // layout plan places there (its gradient is summed with the first's).
    MT_CHECK(!cfg_.tied_embeddings || params_.spec().units[0].held,
             "tied LM head without the embedding unit or its copy on this rank");
    head_ = std::make_unique<HeadSegment>(cfg_, params_, tp_.for_segment(num_segments() - 1), exec_.head_chunk_rows);
  }
}

std::vector<int> Transformer::segment_units(int s) const {
  return params_.spec().segment_units(s);  // its own, its experts', a tied head's embedding
}

void Transformer::check_batch(const TokenBatch& b) const {
  stream_rows(b.n());  // sequence parallelism: the tokens split over tp (ConfigError otherwise)
  MT_REQUIRE(DataError, b.seq <= cfg_.max_seq_len, "batch sequence length ", b.seq, " exceeds model.max_seq_len = ",
             cfg_.max_seq_len);
  for (int64_t i = 0; i < b.n(); ++i)
    MT_REQUIRE(DataError, b.positions[i] >= 0 && b.positions[i] < cfg_.max_seq_len, "position id ", b.positions[i],
               " at flat index ", i, " outside [0, model.max_seq_len = ", cfg_.max_seq_len, ")");
}

Tensor Transformer::forward_segment(int s, const TokenBatch& b, const Tensor& x, SegmentState& st,
                                    const ForwardMode& mode) {
  MT_CHECK(holds(s), "segment ", s, " is not held by this rank");
  fault::point("forward");  // the fault-injection suite's rank deaths (core/fault_injection.h)
  st.forward_done = true;
  if (s == 0) {
    check_batch(b);
    return embedding_->forward(*kernels_, b, alloc_);
  }
  if (s == num_segments() - 1) return head_->forward(*kernels_, b, x, st, mode, alloc_);
  return blocks_[size_t(s - 1)]->forward(*kernels_, x, b, exec_.recompute || !mode.backward, &st.block, alloc_,
                                         mode.loss_coeff, mode.backward);
}

Tensor Transformer::backward_segment_input(int s, const TokenBatch& b, Tensor dy, SegmentState& st,
                                           bool defer_weights) {
  MT_CHECK(st.forward_done && !st.input_grad_done, "segment ", s, ": backward without its forward");
  fault::point("backward");
  st.input_grad_done = true;
  st.weights = WeightGrads(defer_weights, alloc_, b.token_blocks);
  // Reproducible mode keeps a tied table's two writers in lanes of their own
  // (parallel/grad_tree.h, "Tied lanes"): the head's, then the embedding's.
  const bool tied_lanes = cfg_.tied_embeddings && params_.has_grad_lanes();
  if (s == num_segments() - 1) {
    if (tied_lanes) params_.switch_grad_lane(0, 1);
    return head_->backward(*kernels_, b, st, alloc_);
  }
  if (s == 0) {
    if (tied_lanes) params_.switch_grad_lane(0, 0);
    embedding_->backward(*kernels_, b, dy, st.weights, alloc_);
    return Tensor();
  }
  blocks_[size_t(s - 1)]->backward(*kernels_, st.block, b, dy, st.weights, alloc_);
  st.block = Block::Saved{};  // release activations as we go (deferred weight jobs keep theirs)
  return dy;
}

void Transformer::backward_segment_weight(int s, SegmentState& st) {
  MT_CHECK(st.input_grad_done, "segment ", s, ": weight gradient before the input gradient");
  st.weights.run(*kernels_);
}

Tensor Transformer::forward_chain(const TokenBatch& b, std::vector<SegmentState>& states, const ForwardMode& mode) {
  MT_CHECK(holds_all(), "the whole-model calls need every segment on this rank");
  states.resize(size_t(num_segments()));
  Tensor x;
  for (int s = 0; s < num_segments(); ++s) x = forward_segment(s, b, x, states[size_t(s)], mode);
  return x;
}

kernels::CrossEntropyResult Transformer::forward_backward(const TokenBatch& b, double loss_coeff) {
  std::vector<SegmentState> states;
  forward_chain(b, states, ForwardMode{true, loss_coeff, false});
  kernels::CrossEntropyResult loss;
  Tensor d;
  for (int s = num_segments(); s-- > 0;) {
    d = backward_segment_input(s, b, d, states[size_t(s)], /*defer_weights=*/false);
    if (s == num_segments() - 1) loss = states[size_t(s)].loss;  // in B when the head runs in chunks
    states[size_t(s)] = SegmentState{};
  }
  return loss;
}

kernels::CrossEntropyResult Transformer::forward_loss(const TokenBatch& b) {
  std::vector<SegmentState> states;
  forward_chain(b, states, ForwardMode{false, 0.0, false});
  return states.back().loss;
}

Tensor Transformer::forward_logits(const TokenBatch& b) {
  std::vector<SegmentState> states;
  return forward_chain(b, states, ForwardMode{false, 0.0, true});
}

}  // namespace meshtrain::model
