// Decoder-only transformer with explicit forward/backward, as a list of
// segments (segments.h) of which a rank builds and allocates only those its
// partition holds (its pipeline chunks), with layer shapes from the
// rank-local spec (its tensor-parallel slice). The loss is a SUM and a
// COUNT (never a mean); backward is seeded with the loss coefficient the
// trainer chooses (docs/math.md (M.5)-(M.6)); parameter grads accumulate across
// micro-batches. A parallel step runs the segments through the schedule
// executor (parallel/executor.h); the whole-model calls below chain them on
// one rank (generation, evaluation tools, tests).
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/core/precision.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/model/segments.h"

namespace meshtrain::model {

struct ExecOptions {
  bool recompute = false;          // activation recomputation per block (docs/math.md (M.30))
  bool materialize_params = true;  // false: a parallel engine binds unit buffers
  PrecisionPolicy precision = PrecisionPolicy::uniform(DType::F32);
  bool fuse_residual = true;       // residual add inside the output GEMMs where exact (no tp reduction)
  // parallel.tp_overlap: tensor-parallel sums and gathers behind computation (docs/math.md (M.78), (M.79), (M.81)).
  bool overlap_tp = true;
  // Training: the LM head and the loss run in backward, this many rows at a
  // time, so only one chunk of logits ever exists (docs/math.md, "The LM head
  // in row chunks"); 0: the whole micro-batch's logits, formed in forward.
  int64_t head_chunk_rows = 0;
  // A debugging aid: stale gradients hold NaN instead of the last window's
  // values, so a writer that adds without settling fails (parameters.h).
  bool poison_stale_grads = false;
};

class Transformer {
 public:
  // tp: this rank's tensor-parallel group, cp: its context-parallel group
  // (null or size 1: none; under cp every micro-batch is this rank's
  // chunks of its rows, ring_attention.h), ep: its expert-parallel group
  // (MoE blocks; null or size 1: every expert local).
  Transformer(const ModelConfig& cfg, std::shared_ptr<CachingAllocator> alloc, ExecOptions exec = {},
              ModelPartition partition = ModelPartition::whole(), comm::ProcessGroup* tp = nullptr,
              comm::ProcessGroup* cp = nullptr, comm::ProcessGroup* ep = nullptr);
  // The same from a rank-local spec already built (localize: the layout
  // plan's spec, handed over instead of built again). kv_share: the tp ranks
  // sharing this rank's KV head (KV heads fewer than tp ranks; null: none).
  Transformer(const ModelConfig& cfg, std::shared_ptr<CachingAllocator> alloc, ExecOptions exec, ModelSpec local,
              comm::ProcessGroup* tp, comm::ProcessGroup* cp, comm::ProcessGroup* ep,
              comm::ProcessGroup* kv_share = nullptr);
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  ParameterStore& params() { return params_; }
  const ParameterStore& params() const { return params_; }
  const std::shared_ptr<CachingAllocator>& allocator() const { return alloc_; }
  const kernels::KernelTable& kernels() const { return *kernels_; }
  const ExecOptions& exec() const { return exec_; }
  int num_units() const { return params_.num_units(); }
  // The tensor-parallel regions (segment 0's) and what they moved since the
  // last reset, per segment and collective.
  const TpRegions& tp() const { return tp_; }
  TpCommStats& tp_stats() { return *tp_stats_; }
  // What the context-parallel ring moved since the last reset.
  CpCommStats& cp_stats() { return *cp_stats_; }
  const RingAttention& ring() const { return *ring_; }
  // What the MoE blocks routed in training forwards since the last reset.
  MoeStats& moe_stats() { return moe_stats_; }
  // Rows of the residual stream this rank holds (and sends between pipeline
  // stages) for a micro-batch of n tokens: n / tp under sequence parallelism.
  int64_t stream_rows(int64_t n) const { return tp_.local_rows(n); }

  // ---- segments (0 = embedding, 1..L = blocks, L + 1 = head) ----
  int num_segments() const { return int(cfg_.n_layers) + 2; }
  bool holds(int segment) const { return params_.spec().partition.holds(segment); }
  bool holds_all() const { return params_.spec().partition.segments.empty(); }
  // Forward of segment s on input x (ignored by the embedding, which reads
  // the tokens); the head returns nothing (the loss is in st) or, with
  // mode.logits, the logits.
  Tensor forward_segment(int s, const TokenBatch& b, const Tensor& x, SegmentState& st, const ForwardMode& mode);
  // B of segment s: takes dL/d(output) (ignored by the head, whose gradient
  // comes from its loss) and returns dL/d(input) (nothing for the
  // embedding). defer_weights: weight grads wait for backward_weight (W).
  Tensor backward_segment_input(int s, const TokenBatch& b, Tensor dy, SegmentState& st, bool defer_weights);
  void backward_segment_weight(int s, SegmentState& st);  // W
  // Parameter units segment s reads in forward/backward and whose grads it writes.
  std::vector<int> segment_units(int s) const;

  // ---- the whole model on this rank (holds_all) ----
  // Forward + backward of one micro-batch; grads += loss_coeff * d(loss sum).
  kernels::CrossEntropyResult forward_backward(const TokenBatch& b, double loss_coeff);
  // Forward only: loss sum and count (validation).
  kernels::CrossEntropyResult forward_loss(const TokenBatch& b);
  // Logits [n, vocab] of every position (generation, tests); under tensor
  // parallelism this rank's vocabulary columns.
  Tensor forward_logits(const TokenBatch& b);

 private:
  void check_batch(const TokenBatch& b) const;
  Tensor forward_chain(const TokenBatch& b, std::vector<SegmentState>& states, const ForwardMode& mode);

  ModelConfig cfg_;
  std::shared_ptr<CachingAllocator> alloc_;
  ExecOptions exec_;
  const kernels::KernelTable* kernels_;
  ParameterStore params_;
  kernels::RopeTable rope_;
  std::unique_ptr<TpCommStats> tp_stats_;
  MoeStats moe_stats_;  // one entry per MoE block (fixed before the blocks point into it)
  TpRegions tp_;
  std::unique_ptr<CpCommStats> cp_stats_;
  std::unique_ptr<RingAttention> ring_;
  std::unique_ptr<EmbeddingSegment> embedding_;
  std::vector<std::unique_ptr<Block>> blocks_;  // by layer; null where not held
  std::unique_ptr<HeadSegment> head_;
};

}  // namespace meshtrain::model
