// Memory a rank will need, estimated before anything is allocated, and the
// refusal when the ranks of this process (threads) or node (mpirun) cannot
// fit in what is available. Persistent state follows SPEC (29.7)-(29.10)
// from the model spec and the ZeRO stage; activations follow the saved
// tensors of one micro-batch (all layers, or one layer plus the block
// inputs under recomputation, (29.5) with k = 1). A planner will replace
// the estimate with the exact plan; the interface is this one function.
#pragma once

#include <cstdint>
#include <string>

#include "meshtrain/core/memory_limits.h"

namespace meshtrain::train {

struct TrainConfig;

struct MemoryEstimate {
  int64_t params = 0, grads = 0, optimizer = 0;  // persistent (29.7)-(29.10)
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

// ConfigError with the figures when `ranks` x `per_rank` exceeds
// `available`; a warning line when it uses more than 80% of it; "" else.
std::string check_memory_budget(const MemoryEstimate& per_rank, int ranks, const AvailableMemory& available);

}  // namespace meshtrain::train
