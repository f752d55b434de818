// The pipeline part of a configuration ([parallel] pp, schedule,
// virtual_stages, pp_layers) checked before anything runs, and turned into
// the layout plan's options (chunk placement of the schedule, blocks per
// chunk from pp_layers or the cost model of stage_partition.h).
#pragma once

#include <string>

#include "meshtrain/model/model_config.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/parallel_config.h"

namespace meshtrain::parallel {

// ConfigError naming the key when: the schedule is unknown or does not fit
// v; there are more chunks (pp x v) than blocks; v > 1 without pp_layers
// and v does not divide the blocks of a stage; pp_layers has the wrong
// length, an empty chunk or the wrong sum.
void check_pipeline(const ParallelConfig& p, const model::ModelConfig& model, int64_t micro_batches);

// Micro-batch geometry the cost model weighs segments with.
struct MicroBatchShape {
  int64_t rows = 1, seq = 1;
  bool recompute = false;
  DType compute = DType::F32;
};

// pp_layers as given; else for v = 1 and pp > 1 the cost model's balance;
// else equal chunks. `how` (optional) says which.
std::vector<int64_t> chunk_blocks(const ParallelConfig& p, const model::ModelConfig& model, const MicroBatchShape& mb,
                                  std::string* how = nullptr);

// The layout plan's pipeline options: virtual stages, placement, blocks.
void set_pipeline_options(LayoutOptions& o, const ParallelConfig& p, const model::ModelConfig& model,
                          const MicroBatchShape& mb);

// The stage partition with each stage's predicted cost under the schedule
// with m micro-batches (stage_partition.h's table).
std::string pipeline_table(const ParallelConfig& p, const model::ModelConfig& model, const MicroBatchShape& mb,
                           int64_t micro_batches, DType param_dtype);

}  // namespace meshtrain::parallel
