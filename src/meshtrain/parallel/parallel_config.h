// [parallel] settings: data-parallel degree, ZeRO/FSDP state sharding,
// tensor-parallel degree and sequence parallelism, pipeline stages and their
// schedule, context-parallel degree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/model/span_tree.h"

namespace meshtrain::parallel {

// The gradient collective's semantics decide the loss coefficient (docs/math.md (M.6)):
// Sum -> each replica backpropagates (1/N) sum S; Avg -> (R/N) sum S.
enum class GradReduce { Sum, Avg };

struct ParallelConfig {
  int dp = 1;  // 0: take it from the world size (mpirun)
  // Uneven data parallelism (docs/math.md (M.75)): the micro-batches each
  // replica runs per update, one count per dp index (empty: every replica
  // runs training.grad_accum, which is then the largest of them). The
  // window is their sum; replica d takes the micro-batches after those of
  // replicas 0 .. d-1.
  std::vector<int64_t> replica_grad_accum;
  int zero_stage = 0;                // 0 (DDP), 1, 2, 3
  bool reshard_after_forward = true;  // stage 3: free gathered units after forward
  double bucket_mb = 4.0;            // stage 0 gradient bucket size
  GradReduce grad_reduce = GradReduce::Sum;
  bool overlap = true;               // reduce buckets during backward (false: all after backward)
  // Reproducible mode (training.reproducible): gradients summed in one fixed
  // tree over the global micro-batch index (grad_tree.h, tree_reduce.h), so
  // every dp x G split of the same window gives the same bits.
  bool reproducible = false;
  int tp = 1;                        // tensor-parallel degree (innermost mesh axis)
  bool sequence_parallel = false;    // norms and the residual stream on seq / tp rows per tp rank
  // tp collectives behind computation: input gradients' sums behind the
  // weight gradients, row-parallel outputs' in row pieces, and under
  // sequence parallelism the all-gathers behind the work on a rank's own
  // rows (docs/math.md (M.78), (M.79), (M.81)); false: each where it is
  // needed.
  bool tp_overlap = true;
  // Pipeline (docs/math.md, "Pipeline parallelism"): stages, schedule
  // (gpipe | 1f1b | interleaved | zb-h1 | zb-v), chunks per stage, blocks
  // per chunk (empty: the cost model's partition, stage_partition.h);
  // training.grad_accum is the number of micro-batches m of the schedule.
  int pp = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::vector<int64_t> pp_layers;
  // Context parallelism (docs/math.md, "Context parallelism"): every
  // row's positions split over cp ranks (2 cp balanced chunks, ring
  // attention); gradients summed and ZeRO state sharded over dp x cp.
  int cp = 1;
  bool keep_gathered = false;        // ZeRO-3: keep a unit gathered across the window's micro-batches
  // Expert parallelism (docs/moe.md): ranks of dp sharing out the experts of MoE blocks;
  // carved out of dp, never multiplied into the world size (docs/math.md (M.61)).
  int ep = 1;
  void validate() const;             // ConfigError with the key path
};

const char* to_string(GradReduce r);

// Replica d's micro-batches per update and the window index of its first,
// for a config whose replicas run `grad_accum` each unless uneven.
int64_t replica_micro_batches(const ParallelConfig& cfg, int d, int64_t grad_accum);
int64_t replica_first_micro_batch(const ParallelConfig& cfg, int d, int64_t grad_accum);
// "3+3+2" (the counts joined by `separator`) when uneven, else grad_accum.
std::string describe_grad_accum(const std::vector<int64_t>& replica_grad_accum, int64_t grad_accum,
                                const std::string& separator = "+");
// The busiest replica's micro-batches per update.
int64_t largest_micro_batches(const std::vector<int64_t>& replica_grad_accum, int64_t grad_accum);
// Micro-batches per update over all dp replicas.
int64_t window_micro_batches(int64_t dp, const std::vector<int64_t>& replica_grad_accum, int64_t grad_accum);
int64_t window_micro_batches(const ParallelConfig& cfg, int64_t grad_accum);
// The micro-batches of each rank of the data group (i = dp index x cp +
// cp index) when the counts are uneven: a replica's cp index 0 holds its
// span, the others none (their leaves hold -0, docs/math.md (M.74)); empty
// when even.
std::vector<model::LeafSpan> data_group_spans(const ParallelConfig& cfg);

// The loss coefficient each replica backpropagates for a window of N
// supervised targets over R replicas (docs/math.md (M.6)): 1/N when the gradient
// collective sums, R/N when it averages.
double loss_coefficient(GradReduce reduce, int replicas, int64_t N);

}  // namespace meshtrain::parallel
