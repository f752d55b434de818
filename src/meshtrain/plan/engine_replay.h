// The data-parallel engine's buffers and collectives, replayed: a mirror of
// data_parallel.cc, param_gather.cc, grad_buckets.cc, sharded_grads.cc,
// tp_grad_sums.cc and grad_norm.cc that allocates what they allocate (persistent state at
// construction; gathered units, transient full gradients and reduce-type
// staging during a step) and writes down every collective they issue.
//
// One thing a replay cannot know: when an overlapped reduce-scatter
// finishes. Under ZeRO 2/3 a unit's transient full gradient (and staging
// under a narrower reduce type) is freed by the first prepare() that finds
// its reduction complete; `completion_lag` says how many later backward
// actions that takes (1: done by the next one; kNever: only when waited
// for). The communication buffer peak is bracketed by the two extremes.
#pragma once

#include <limits>
#include <vector>

#include "meshtrain/comm/comm_plan.h"
#include "meshtrain/core/memory_replay.h"
#include "meshtrain/parallel/grad_buckets.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/parallel_config.h"

namespace meshtrain::plan {

inline constexpr int kNeverCompletes = std::numeric_limits<int>::max() / 2;

// grad_norm.cc: the norm blocks a rank lists after its dp gather (every
// replica's blocks of its units when the optimizer state is sharded).
int64_t norm_blocks(const parallel::ShardPlan& shards, int dp);

class EngineReplay {
 public:
  // DataParallel's constructor: the persistent parameters, master weights,
  // gradients and Adam moments of (29.7)-(29.10), as allocated; in
  // reproducible mode also the previous window's tree roots, which stay
  // until the next window begins (begin_window).
  EngineReplay(MemoryReplay& r, comm::CommLedger& ledger, const parallel::LayoutPlan& plan,
               const parallel::ParallelConfig& cfg, const PrecisionPolicy& precision, int completion_lag);

  void begin_window();
  // The step program's parameter actions (program.h).
  void gather(int u);
  void require(int u);
  void release(int u);
  void prepare_grads(int u);
  void close_leaf(int u);  // reproducible mode (grad_tree.cc)
  void reduce_grads(int u);
  void finish_grads();
  // A backward compute action starts (the clock completion_lag counts in).
  void on_backward_action() { ++backward_actions_; }
  // Which pass the next compute action belongs to: gathers are booked there.
  void set_gather_phase(comm::StepPhase p) { gather_phase_ = p; }
  // grad_norm.cc: the canonical-order gathers of the norm's block sums;
  // longest_model_list: the most blocks any rank of this rank's pp x tp
  // group holds after the dp gather (norm_blocks of each).
  void grad_norm(int64_t longest_model_list);
  // step(): owners update, then publish parameters (stages 1, 2).
  void publish();

 private:
  struct Bucket {
    parallel::BucketRange range;
    int ready = 0;
    SymTensor staging;
  };
  struct Reduction {
    bool in_flight = false;
    int64_t launched_at = 0;  // backward actions seen when it was launched
  };
  std::pair<std::string, int> group_of(int u) const;  // the group unit u reduces over, and its size
  void add(const std::string& group, int size, comm::OpKind kind, int64_t bytes, comm::StepPhase phase,
           std::string what);
  void reap();
  void complete(int u);
  void reduce_tree(int u);  // data_parallel.cc reduce_tree with tree_reduce.cc's exchanges
  // tp_grad_sums.cc reduce: unit u's gradients partial over tp ranks (norm
  // weights under SP, shared KV heads), packed per group and all-reduced.
  void sum_over_tp(int u);
  struct TpSum {
    std::string group;
    int size = 1;
    int64_t numel = 0;
  };
  struct TreeNode {
    int level;
    SymTensor sum;
  };

  MemoryReplay& r_;
  comm::CommLedger& ledger_;
  const parallel::LayoutPlan& plan_;
  const parallel::ShardPlan& shards_;
  parallel::ParallelConfig cfg_;
  PrecisionPolicy precision_;
  int lag_;
  int dp_;
  std::vector<SymTensor> persistent_;
  std::vector<SymTensor> gathered_, full_, staging_;
  std::vector<SymTensor> open_leaf_;             // reproducible mode: per unit
  std::vector<std::vector<TreeNode>> tree_;      // reproducible mode: per unit, the binary counter
  std::vector<Reduction> reductions_;
  std::vector<int64_t> window_of_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<std::vector<TpSum>> tp_sums_;  // per unit, in TpGradSums' order
  int64_t backward_actions_ = 0;
  comm::StepPhase gather_phase_ = comm::StepPhase::Forward;
};

}  // namespace meshtrain::plan
