// Data parallelism with ZeRO/FSDP state sharding (docs/math.md, "ZeRO: state
// sharding and memory per rank"), one code path for every stage and for
// R = 1 (a group of size 1 communicates nothing). A stage of (M.26) is two
// strategies:
//   where parameters live and how a unit's values are made available
//   (param_residency.h): replicated full values (stages 0-2; stages 1 and 2
//   publish the owners' updated shards after the step) or the owned shard
//   gathered per unit around its use (stage 3);
//   how gradients are reduced and kept (grad_reduction.h): all-reduced in
//   buckets (stage 0) or reduce-scattered into the owned shard (stages 1-3),
//   in reproducible mode through the fixed summation tree.
// The optimizer updates the owned range of every unit (the whole unit under
// stage 0: ShardPlan). Under the 16-bit policies the engine keeps f32
// master weights for that range (with the optimizer state: sharded from
// stage 1) and converts them into the 16-bit parameters the layers read
// after every update (then publishes them as before, in 16 bits: half the
// bytes).
// The engine does nothing on its own: the step program (program.h) tells it
// when a unit's parameters are needed (Gather / Require / Release) and when
// its gradient is complete for the window (ReduceGrads, placed by counting
// the window's backward actions). Every buffer's size and every owner come
// from the layout plan; dtypes from the precision policy.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/parallel/grad_norm.h"
#include "meshtrain/parallel/grad_reduction.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/param_residency.h"
#include "meshtrain/parallel/parallel_config.h"
#include "meshtrain/parallel/program.h"
#include "meshtrain/parallel/rank_groups.h"
#include "meshtrain/parallel/tp_grad_sums.h"
#include "meshtrain/parallel/unit_groups.h"

namespace meshtrain::parallel {

class DataParallel {
 public:
  // groups (rank_groups.h): the data group ZeRO shards over and gradients
  // are summed over, the edp group of the routed experts' units
  // (unit_groups.h), the model groups the norm spans, the tp group and its
  // sub-groups partial gradients are summed over (tp_grad_sums.h), the tie
  // group a tied weight's reduced gradient is summed over too. The model
  // must be built from plan.spec() with materialize_params = false.
  DataParallel(model::Transformer& model, const LayoutPlan& plan, const RankGroups& groups, const ParallelConfig& cfg,
               const optim::OptimizerConfig& opt, const std::shared_ptr<CachingAllocator>& alloc);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const LayoutPlan& layout() const { return layout_; }
  const ShardPlan& plan() const { return layout_.shards(); }
  const ParallelConfig& config() const { return cfg_; }
  model::Transformer& model() { return model_; }
  ParamPolicy param_policy() const;
  // Loss coefficient for a window with N supervised targets (docs/math.md (M.6)).
  double loss_coefficient(int64_t N) const;

  // ---- the window, driven by the step program ----
  void begin_window();
  void gather(int u) { params_->gather(u); }           // ZeRO-3: start gathering unit u
  void require_params(int u) { params_->require(u); }  // ZeRO-3: u's parameters must be bound now
  void release(int u) { params_->release(u); }         // ZeRO-3: free u's gathered parameters
  void release_gathered() { params_->release_all(); }  // after forward-only passes
  void prepare_grads(int u) { grads_->prepare(u); }    // a backward is about to write u's gradient
  // Reproducible mode: this micro-batch's gradient of u is complete.
  void close_leaf(int u) { grads_->close_leaf(u); }
  void reduce_grads(int u) { grads_->reduce(u); }  // u's gradient is complete for the window
  void finish_grads();                             // waits for every reduction (the tail)
  const GradSyncStats& sync_stats() const { return stats_; }
  const UnitGroups& unit_groups() const { return groups_; }
  // The model axes times the expert-parallel axis (the model group without
  // expert parallelism): global views of the routed experts span it.
  comm::ProcessGroup& expert_model_group() const { return expert_model_; }
  const TpGradSumStats& tp_sum_stats() const { return tp_sums_.stats(); }

  // Sum of squares of the reduced gradient over the unique parameters
  // (grad_norm.h; collective).
  double grad_sum_squares();
  // Owners update their shard, then publish parameters (stage 1, 2).
  void step(double lr, double grad_scale);
  int64_t optimizer_steps() const { return adamw_->steps_taken(); }
  optim::AdamW& optimizer() { return *adamw_; }

  // ---- state access (checkpoints, verification) ----
  // The authoritative weights this rank keeps of unit u and the flat range
  // of the unit they cover: the f32 master's owned range under the 16-bit
  // policies; else the parameters (the whole padded unit under stages 0-2,
  // the owned shard under stage 3). Checkpoints read and write these; after
  // writing them call refresh_params() (collective).
  Tensor weights(int u);
  std::pair<int64_t, int64_t> weights_range(int u) const;
  // Re-derives the parameters the layers read from the authoritative
  // weights (16-bit conversion, publishing the owned ranges under stages 1
  // and 2). Collective over dp.
  void refresh_params();
  Tensor owned_params(int u);  // the owned range the optimizer updates (the master when there is one)
  // The owned range of the parameters the layers read (the compute dtype;
  // the same tensor as owned_params without a master); undefined if empty.
  Tensor owned_compute_params(int u);
  Tensor owned_grad(int u) { return grads_->owned(u); }  // reduced gradient of the owned range (after finish_grads)
  Tensor moment(int which, int u);  // Adam moment of the owned range: 0 = m, 1 = v
  // Full logical values of every held unit, concatenated in unit order, as
  // doubles (collective over dp): verification and tests.
  std::vector<double> gather_params();
  std::vector<double> gather_grads();  // after finish_grads()
  std::vector<double> gather_unit(int u, bool grads);

 private:
  comm::ReduceOp reduce_op() const;

  model::Transformer& model_;
  const LayoutPlan& layout_;
  comm::ProcessGroup& dp_;
  comm::ProcessGroup& model_group_;
  comm::ProcessGroup& expert_model_;
  UnitGroups groups_;
  GradNorm norm_;
  comm::ProcessGroup* tie_;
  ParallelConfig cfg_;
  std::shared_ptr<CachingAllocator> alloc_;
  GradSyncStats stats_;
  int nu_;

  TpGradSums tp_sums_;                        // partial over tensor-parallel ranks
  std::unique_ptr<ParamResidency> params_;    // the stage's parameters
  std::vector<Tensor> masters_;               // 16-bit policies: f32 master of the owned range per unit
  std::unique_ptr<GradReduction> grads_;      // the stage's gradients
  std::vector<optim::OptSegment> opt_segments_;
  std::unique_ptr<optim::AdamW> adamw_;
};

}  // namespace meshtrain::parallel
