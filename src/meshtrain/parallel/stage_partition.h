// Pipeline stage partitioning by a cost model (docs/math.md, "Rule: stage
// partitioning": stages are balanced by modelled cost, embedding and LM head
// included, not by equal block counts; the slowest stage sets the beat). Every
// segment (embedding, each block, head with its loss) gets its forward +
// backward FLOPs per micro-batch and the activation bytes it keeps from forward
// to backward; balance_blocks() splits the blocks into contiguous chunks (the
// first with the embedding, the last with the head) minimizing the largest
// chunk's FLOPs. partition_table() prints the predicted cost of each stage
// under a schedule (its live micro-batches from the unit-time simulation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/dtype.h"
#include "meshtrain/model/model_config.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/schedule.h"

namespace meshtrain::parallel {

struct SegmentCost {
  std::string name;              // "embedding", "block 3", "head"
  double flops = 0;              // forward + backward (+ recompute) of one micro-batch
  int64_t activation_bytes = 0;  // kept from its forward to its backward, one micro-batch
  int64_t params = 0;            // parameter elements
};

// Per segment (0 = embedding, l + 1 = block l, n_layers + 1 = head) for
// micro-batches of `rows` x `seq` tokens. Matmul FLOPs 2 per multiply-add,
// causal attention over (seq + 1) / 2 keys on average, backward twice the
// forward, recompute one more block forward; activations in `compute`.
std::vector<SegmentCost> segment_costs(const model::ModelConfig& cfg, int64_t rows, int64_t seq, bool recompute,
                                       DType compute);

// Blocks per chunk for `chunks` contiguous chunks minimizing the largest
// chunk's FLOPs (ties: the earlier chunks take more blocks). ConfigError
// when there are more chunks than blocks.
std::vector<int64_t> balance_blocks(const std::vector<SegmentCost>& costs, int chunks);

// One line per pipeline stage: its segments, FLOPs per micro-batch and
// share of the slowest stage, activation bytes per micro-batch, the live
// micro-batches the schedule keeps there and the peak activation bytes,
// parameter bytes (in `param_dtype`).
std::string partition_table(const std::vector<SegmentCost>& costs, const std::vector<Chunk>& chunks,
                            const Schedule& schedule, DType param_dtype, const std::string& how);

}  // namespace meshtrain::parallel
