// Activation bytes one rank keeps for backward of one micro-batch of n
// tokens: every tensor the segments' forward saves (the Activations
// category of the rank's allocator at the end of forward, allocator
// rounding included), from the rank-local spec. With sequence parallelism
// the residual stream (the embedding output, each block's h and output)
// and the norms' per-row statistics hold n / t rows instead of n, so
//   saved(no SP) - saved(SP) = (1 - 1/t) n e (2L + 1)(d + k)
// for L blocks, hidden d, element size e and k statistics per row per norm
// (1 for RMSNorm, 2 for LayerNorm); the normed inputs of the
// column-parallel layers are kept gathered ([n, d]) either way, so backward
// needs no second all-gather.
#pragma once

#include "meshtrain/core/dtype.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::model {

// The head as forward keeps it by default (the logits, (M.31)); with
// training.head_chunk_rows forward keeps no logits ((M.77)), which the
// planner's recorded step (train/meta_step.h) accounts for.
struct ActivationBytes {
  int64_t embedding = 0;  // the stream leaving the embedding
  int64_t per_block = 0;
  int64_t head = 0;       // final norm statistics, the LM head's input and the logits
  int64_t total(int64_t blocks) const { return embedding + blocks * per_block + head; }
};

// stream_rows: the rows of the residual stream the rank holds (n, or n / t
// under sequence parallelism). Parts of segments the rank does not hold
// are 0.
ActivationBytes activation_bytes(const ModelConfig& cfg, const ModelSpec& local, int64_t n, int64_t stream_rows,
                                 DType dtype);

}  // namespace meshtrain::model
