// What decides the arithmetic of a step for a layout (docs/math.md, "Rule:
// restore claims"): the global window and its split, the model axes, the
// backend, reproducible mode, whether a tied weight's gradient sums copies on
// two pipeline stages, and the kernel environment. A checkpoint records these
// facts ("layout" and "kernels" in its metadata); a resume compares the saved
// facts with the live layout's (restore_claim.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshtrain::parallel {
class LayoutPlan;
}

namespace meshtrain::train {

struct TrainConfig;

struct LayoutFacts {
  int64_t dp = 1, grad_accum = 1, micro_batch = 1;
  // Each replica's micro-batches when uneven (grad_accum: the largest);
  // empty when every replica runs grad_accum (docs/math.md (M.75)).
  std::vector<int64_t> replica_grad_accum;
  int tp = 1, cp = 1, ep = 1, pp = 1;
  bool sequence_parallel = false;
  std::string backend = "threads";
  bool reproducible = false;
  // Reproducible mode's canonical blocks, which every sum tensor parallelism
  // splits follows (docs/math.md (M.73), (M.76)); 0 without the mode or
  // before the blocks were recorded.
  int canonical_blocks = 0;
  // The tied embedding and the head sit on two pipeline stages: the tie
  // group sums the two copies' gradients, where one stage interleaves them.
  bool tie_sums_two_stages = false;
  // training.head_chunk_rows: the LM head's weight gradient summed in row
  // chunks of this size (0: all rows at once; docs/math.md (M.77)).
  int64_t head_chunk_rows = 0;
  // kernel_environment() of the writing process; null when not recorded.
  nlohmann::json kernels;

  // Rows per update: dp x grad_accum x micro_batch (the replicas' counts
  // summed when uneven).
  int64_t window_rows() const;

  // From a checkpoint's metadata. Defaults for checkpoints that predate a
  // record: cp, tp, pp and ep 1, backend "threads", not reproducible, no
  // sequence parallelism; without the tie record the tie follows the
  // schedule's chunk placement (a tied model on pp > 1 stages with the loop
  // placement has its head on another stage). CheckpointError naming the key
  // when "layout" or its dp, grad_accum or micro_batch is missing.
  static LayoutFacts from_metadata(const nlohmann::json& meta);
  // The live layout: the tie from the plan's own tie stages, the kernels of
  // this process.
  static LayoutFacts from_layout(const TrainConfig& cfg, const parallel::LayoutPlan& plan);

  // The facts' part of a checkpoint's "layout" record (the writer adds the
  // keys that do not decide the arithmetic: zero_stage, schedule, ...).
  nlohmann::json layout_json() const;
};

}  // namespace meshtrain::train
