// The model as a list of segments a pipeline stage can own: the embedding
// (segment 0), each block (segment l + 1) and the head (final norm, LM head
// and loss; segment n_layers + 1). Segment s reads and writes parameter
// unit s (the tied head also unit 0). A segment's forward returns its
// output activations; its backward is split into the input gradient (B)
// and the weight gradient (W), which a zero-bubble schedule runs later.
#pragma once

#include <memory>

#include "meshtrain/kernels/cpu/cross_entropy.h"
#include "meshtrain/model/block.h"
#include "meshtrain/model/regions.h"

namespace meshtrain::model {

struct ForwardMode {
  bool backward = true;     // keep what backward needs (training)
  double loss_coeff = 0.0;  // head: dlogits = coeff * d(loss sum), docs/math.md (M.5)-(M.6)
  bool logits = false;      // head: return the logits instead of computing the loss
};

// What one micro-batch keeps of one segment between F, B and W.
struct SegmentState {
  Block::Saved block;
  Tensor x_final, xf, dlogits;  // head: its input rows, the LM head's (gathered) input, dlogits (in the logits' buffer)
  Norm::Stats final_stats;
  kernels::CrossEntropyResult loss;  // head: loss SUM and COUNT of the micro-batch
  // Head in row chunks: the loss comes with B (forward keeps the coefficient).
  bool loss_in_backward = false;
  double loss_coeff = 0.0;
  WeightGrads weights;
  bool forward_done = false, input_grad_done = false;
};

// Vocabulary-parallel token embedding (docs/math.md (M.39)): this
// rank's vocabulary rows give a partial lookup (zero for ids outside
// them) summed over the tensor-parallel group by the row-output region
// (reduce-scattered to this rank's rows under SP); learned positions
// are added after, on the rows the rank holds, so they count once.
class EmbeddingSegment {
 public:
  EmbeddingSegment(const ModelConfig& cfg, ParameterStore& params, const TpRegions& tp);
  // This rank's rows of the stream [nl, d].
  Tensor forward(const kernels::KernelTable& k, const TokenBatch& b,
                 const std::shared_ptr<CachingAllocator>& alloc) const;
  void backward(const kernels::KernelTable& k, const TokenBatch& b, const Tensor& dx, WeightGrads& wg,
                const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  int64_t d_;
  DType acc_;  // activations' type
  Parameter* tokens_;
  Parameter* positions_ = nullptr;
  TpRegions tp_;
};

// Final norm (on this rank's rows), the LM head column-parallel over the
// vocabulary (its input through the column-input region) and the
// vocabulary-parallel cross-entropy (vocab_parallel.h): full logits are
// never formed. With chunk_rows > 0 a training forward stops at the head's
// input and backward runs the head, the loss, its gradient and the head's
// weight gradient chunk_rows rows at a time (docs/math.md, "The LM head in
// row chunks"): [chunk_rows, vocab] logits instead of [n, vocab].
class HeadSegment {
 public:
  // tied: the LM head is the token embedding (same parameter, same unit 0).
  HeadSegment(const ModelConfig& cfg, ParameterStore& params, const TpRegions& tp, int64_t chunk_rows = 0);
  // Training: the loss and dlogits (in place of the logits) in st, or with
  // chunks only what backward needs (st.loss_in_backward); returns nothing.
  // mode.logits: returns the logits of this rank's vocabulary slice
  // [n, vocab rows held] (all of them on one rank).
  Tensor forward(const kernels::KernelTable& k, const TokenBatch& b, const Tensor& x, SegmentState& st,
                 const ForwardMode& mode, const std::shared_ptr<CachingAllocator>& alloc) const;
  // B: the gradient of the head's input (this rank's rows); weight grads to
  // st.weights (with chunks: at once, a chunk's dlogits live one chunk).
  Tensor backward(const kernels::KernelTable& k, const TokenBatch& b, SegmentState& st,
                  const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  // Loss SUM and COUNT of the rows' chunks; with grad_scale != 0 also the
  // input gradient dxf [n, d] and the weight gradient, chunk by chunk.
  kernels::CrossEntropyResult chunked_loss(const kernels::KernelTable& k, const TokenBatch& b, const Tensor& xf,
                                           double grad_scale, const Tensor& dxf,
                                           const std::shared_ptr<CachingAllocator>& alloc) const;

  const ModelConfig& cfg_;
  DType op_, acc_;  // matmul operand type, activations' type
  Norm norm_;
  Linear head_;
  TpRegions tp_;
  int64_t chunk_rows_;
};

}  // namespace meshtrain::model
