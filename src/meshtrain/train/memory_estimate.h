// Memory a rank will need, estimated before anything is allocated where no
// training step exists to record (eval, generate, bench comm), and the
// refusal when the ranks of this process cannot fit in what is available.
// Persistent state follows docs/math.md (M.26) from the model spec and the
// ZeRO stage; activations follow the saved tensors of one micro-batch (all
// layers, or one layer plus the block inputs under recomputation, (M.30)
// with k = 1, counted as (M.33); a MoE block's top_k experts per token and
// its router's per-expert probabilities, docs/moe.md). A training run is
// checked against its recorded step instead (run_memory.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "meshtrain/core/memory_limits.h"
#include "meshtrain/model/model_config.h"

namespace meshtrain::train {

struct TrainConfig;

struct MemoryEstimate {
  int64_t params = 0, grads = 0, optimizer = 0;  // persistent, docs/math.md (M.26)
  int64_t activations = 0;                        // one micro-batch, forward + backward peak
  int64_t workspace = 0;  // gathered/prefetched units, transient full gradients, buckets, RoPE table
  int64_t total() const { return params + grads + optimizer + activations + workspace; }
  std::string str() const;  // "params 1.2 GiB, grads ..., total ..."
};

// Per rank, for cfg (model finalized) at data-parallel degree `dp`, the
// weights split over cfg.parallel.tp x pp. `meshtrain plan` gives the exact
// figure per rank and category.
// Overflow-checked: an estimate beyond 2^62 bytes is reported as 2^62.
MemoryEstimate estimate_rank_memory(const TrainConfig& cfg, int dp);

// The figures of `ranks` x `per_rank` against `available` (core/memory_limits.h).
std::string check_memory_budget(const MemoryEstimate& per_rank, int ranks, const AvailableMemory& available,
                                const std::string& remedy);

// check_memory_budget against what this machine has left now. eval,
// generate and bench comm check this first; a training run checks its
// recorded step instead (run_memory.h).
void check_available_memory(const MemoryEstimate& per_rank, int ranks, std::FILE* console, const std::string& remedy);

// A model held for inference (generate): its weights and the gradient
// buffers the parameter store keeps beside them, and the activations of a
// forward and backward of `rows` x `seq_len` tokens (an upper bound of a
// forward's).
MemoryEstimate estimate_model_memory(const model::ModelConfig& model, int64_t rows, int64_t seq_len);

}  // namespace meshtrain::train
