// The sharding plan: one description, read by the engine, the optimizer,
// the norm and checkpoints. Every unit's flat buffer is padded to a multiple
// of R * kNormBlock; with ZeRO stage >= 1 rank r owns the flat range
// [r * shard, (r + 1) * shard) of every unit (stage 0: the whole unit).
// R and r are the unit's group's: the data group (dp x cp) for dense units,
// the expert-data-parallel group (the replicas of the same experts, docs/math.md,
// "Rule: where experts live") for routed experts' units.
// Norm blocks of kNormBlock elements never straddle two owners, so the
// global gradient norm is summed in the same order under every stage. A unit
// this rank does not hold (another pipeline stage's) has no elements.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "meshtrain/core/precision.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::parallel {

inline constexpr int64_t kNormBlock = kernels::kSumBlock;

struct UnitShard {
  int group_size = 1, group_rank = 0;  // the group it is sharded and reduced over
  bool experts = false;                // that group is the expert-data-parallel one
  int64_t numel = 0;   // logical elements
  int64_t padded = 0;  // multiple of R * kNormBlock
  int64_t shard = 0;   // padded / R
  int64_t owned_begin = 0, owned_end = 0;  // flat range this rank updates
};

// A parameter's elements inside this rank's owned range of its unit.
struct OwnedPiece {
  int param = 0;
  int64_t param_begin = 0, param_end = 0;  // flat range within the parameter
  int64_t unit_offset = 0;                 // flat offset of param_begin within the unit
};

class ShardPlan {
 public:
  // The plan shares the (rank-local) spec it describes: it stays valid
  // whoever else holds the spec.
  // edp_size / edp_rank: the expert units' group (0: the data group, as
  // without expert parallelism).
  ShardPlan(std::shared_ptr<const model::ModelSpec> spec, int dp_size, int dp_rank, int zero_stage, int edp_size = 0,
            int edp_rank = 0);
  const model::ModelSpec& spec() const { return *spec_; }

  int stage() const { return stage_; }
  int size() const { return R_; }     // the data group (dense units)
  int rank() const { return rank_; }
  bool shards_optimizer() const { return stage_ >= 1; }
  bool shards_grads() const { return stage_ >= 2; }
  bool shards_params() const { return stage_ >= 3; }
  const UnitShard& unit(int u) const { return units_[size_t(u)]; }
  int num_units() const { return int(units_.size()); }
  int64_t owned_numel(int u) const { return unit(u).owned_end - unit(u).owned_begin; }
  std::vector<OwnedPiece> owned_pieces(int u) const;
  // Parameters' elements inside the flat unit range [begin, end).
  std::vector<OwnedPiece> pieces_in(int u, int64_t begin, int64_t end) const;
  // The flat range of unit u whose parameter values this rank holds: the
  // whole unit under stages 0-2, the owned shard under stage 3.
  std::pair<int64_t, int64_t> param_range(int u) const {
    return shards_params() ? std::pair{unit(u).owned_begin, unit(u).owned_end} : std::pair{int64_t(0), unit(u).numel};
  }
  // The 1/R of unit u this rank writes to a checkpoint: its shard range
  // under every stage (stage 0 replicas split the writing).
  std::pair<int64_t, int64_t> save_range(int u) const {
    const UnitShard& s = unit(u);
    return {int64_t(s.group_rank) * s.shard, int64_t(s.group_rank + 1) * s.shard};
  }
  int64_t padded_total() const;  // sum of padded unit sizes
  // Units in the order their segments run forward, a block's experts after
  // the block: the order of the flat gradient buffer (reversed: the order
  // backward completes them, so DDP buckets are contiguous ranges).
  std::vector<int> segment_order() const;
  // Each unit's offset in the flat gradient buffer of stages 0 and 1 (padded
  // units in segment order).
  std::vector<int64_t> flat_offsets() const;

  // Persistent bytes per rank of docs/math.md (M.26) under a precision policy,
  // on the padded sizes: P = parameters (policy.params), G = gradients
  // (grad_accum), O = Adam's two moments plus the master weights when the
  // parameters are 16-bit (fp32: 4 + 4 + 8 = 16 bytes per parameter;
  // bf16 with f32 masters: 2 + 4 + (4 + 8) = 18).
  struct Persistent {
    int64_t params = 0, grads = 0, optimizer = 0;
    int64_t total() const { return params + grads + optimizer; }
  };
  Persistent persistent_bytes(const PrecisionPolicy& precision) const;

 private:
  std::shared_ptr<const model::ModelSpec> spec_;
  int R_, rank_, stage_;
  std::vector<UnitShard> units_;
};

}  // namespace meshtrain::parallel
