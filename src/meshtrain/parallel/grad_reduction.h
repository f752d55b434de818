// How gradients are reduced over a unit's group and where the reduced
// gradient is kept: the gradient side of the ZeRO stages of docs/math.md
// (M.26).
//   AllReducedGrads (stage 0): every held unit's full gradient in one flat
//     buffer, all-reduced in buckets as units complete (grad_buckets.h);
//   ScatteredGrads (stages 1-3): each unit reduce-scattered once complete,
//     so each rank keeps the shard it owns (sharded_grads.h): in the flat
//     buffer under stage 1, a persistent shard under stages 2 and 3;
//   TreeGrads (reproducible mode, docs/math.md (M.10)): either of them with
//     each micro-batch's gradient in a leaf of its own (grad_tree.h), the
//     window's root reduced across replicas in tree order (tree_reduce.h).
// Within a window gradients accumulate locally; a unit's gradient is summed
// over the tensor-parallel ranks it is partial over (tp_grad_sums.h) before
// the data-parallel reduction.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/model/parameters.h"
#include "meshtrain/model/span_tree.h"
#include "meshtrain/parallel/grad_buckets.h"
#include "meshtrain/parallel/grad_tree.h"
#include "meshtrain/parallel/parallel_config.h"
#include "meshtrain/parallel/shard_plan.h"
#include "meshtrain/parallel/sharded_grads.h"
#include "meshtrain/parallel/sync_stats.h"
#include "meshtrain/parallel/tp_grad_sums.h"
#include "meshtrain/parallel/unit_groups.h"

namespace meshtrain::parallel {

// What every reduction works with (all owned by the engine).
struct GradContext {
  const ShardPlan& plan;
  model::ParameterStore& store;
  const UnitGroups& groups;
  TpGradSums& tp_sums;
  comm::ReduceOp op;
  std::shared_ptr<CachingAllocator> alloc;
  GradSyncStats& stats;
};

class GradReduction {
 public:
  explicit GradReduction(const GradContext& c) : c_(c) {}
  virtual ~GradReduction() = default;
  GradReduction(const GradReduction&) = delete;
  GradReduction& operator=(const GradReduction&) = delete;

  virtual void begin_window() = 0;
  virtual void prepare(int u) = 0;  // a backward is about to write u's gradient
  virtual void close_leaf(int u);   // reproducible mode: this micro-batch's gradient of u is complete
  virtual void reduce(int u) = 0;   // u's gradient is complete for the window: start its reduction
  virtual void wait_all() = 0;      // the tail
  virtual Tensor owned(int u) = 0;  // the reduced gradient of u's owned range (after wait_all)
  // The window's whole gradient of u summed in the fixed tree (and over tp
  // ranks): reduced over u's group in tree order, into the kept gradient.
  virtual void reduce_root(int u, const Tensor& root) = 0;
  // The window's gradient of u already summed over u's group (every rank
  // holds all of it): into the kept gradient.
  virtual void keep_reduced(int u, const Tensor& reduced) = 0;

 protected:
  // u's gradient accumulated in place, made whole for the reduction: bound
  // (stages 2/3: a unit no backward touched still sums its zeros), settled
  // (what no backward wrote reads zero) and summed over tp ranks.
  void complete_in_place(int u);
  GradContext c_;
};

// Every held unit's padded gradient, contiguous in segment order
// (ShardPlan::flat_offsets: backward completes them in reverse, so buckets
// are contiguous ranges), bound into the model (stages 0 and 1).
class FlatGrads {
 public:
  // zero_eagerly: a tree reduces into the buffer (reproducible mode), so
  // each window starts from zeros; else backward accumulates in place and
  // its first write of each parameter overwrites (no pass over the buffer);
  // padding stays zero: nothing writes it.
  FlatGrads(const GradContext& c, bool zero_eagerly);
  void begin_window();
  Tensor unit(int u) const;
  const Tensor& buffer() const { return buffer_; }
  const std::vector<int64_t>& offsets() const { return offset_; }

 private:
  const ShardPlan& plan_;
  model::ParameterStore& store_;
  Tensor buffer_;
  std::vector<int64_t> offset_;
  bool zero_eagerly_;
};

class AllReducedGrads final : public GradReduction {
 public:
  AllReducedGrads(const GradContext& c, double bucket_mb, bool zero_eagerly);
  void begin_window() override;
  void prepare(int /*u*/) override {}
  void reduce(int u) override;
  void wait_all() override { buckets_.wait_all(); }
  Tensor owned(int u) override;
  void reduce_root(int u, const Tensor& root) override;
  void keep_reduced(int u, const Tensor& reduced) override;

 private:
  FlatGrads flat_;
  GradBuckets buckets_;
};

class ScatteredGrads final : public GradReduction {
 public:
  ScatteredGrads(const GradContext& c, bool zero_eagerly);
  void begin_window() override;
  void prepare(int u) override { sharded_.prepare(u); }
  void reduce(int u) override;
  void wait_all() override { sharded_.wait_all(); }
  Tensor owned(int u) override { return sharded_.owned(u); }
  void reduce_root(int u, const Tensor& root) override;
  void keep_reduced(int u, const Tensor& reduced) override;

 private:
  std::optional<FlatGrads> flat_;  // stage 1
  ShardedGrads sharded_;
};

class TreeGrads final : public GradReduction {
 public:
  // ep: the expert-parallel size; an expert's owner keeps each ep source's
  // leaves in a lane of its own (grad_tree.h), its blocks switch lanes
  // (moe_layer.cc).
  // A tied embedding's unit keeps the embedding's and the LM head's writes
  // in two lanes, each reduced over the replicas before they are added
  // (grad_tree.h, "Tied lanes").
  // cp: the context-parallel group, whose ranks' leaves are summed per
  // micro-batch (close_leaf; null or one rank: none).
  // spans: the window's micro-batches each data-group rank holds when the
  // replicas' counts are uneven (empty: even; data_group_spans), summed
  // over the group by span_tree_all_reduce (docs/math.md (M.75)).
  TreeGrads(const GradContext& c, int ep, std::unique_ptr<GradReduction> inner, comm::ProcessGroup* cp = nullptr,
            std::vector<model::LeafSpan> spans = {});
  ~TreeGrads() override;
  void begin_window() override;
  void prepare(int u) override;
  void close_leaf(int u) override;
  void reduce(int u) override;
  void wait_all() override { inner_->wait_all(); }
  Tensor owned(int u) override { return inner_->owned(u); }
  void reduce_root(int u, const Tensor& root) override { inner_->reduce_root(u, root); }
  void keep_reduced(int u, const Tensor& reduced) override { inner_->keep_reduced(u, reduced); }

 private:
  // The tied unit: each lane this rank writes reduced on its own, then added.
  void reduce_tied(int u);
  // Lane `lane` of u (-1: all lanes summed) summed over tp ranks and u's
  // group, into the kept gradient.
  void reduce_lane(int u, int lane);
  void sum_leaf_over_cp(int u);
  std::unique_ptr<GradReduction> inner_;
  comm::ProcessGroup* cp_;
  std::vector<model::LeafSpan> spans_;
  GradTree tree_;
};

// The reduction the plan's stage and the configuration call for.
// spans: as TreeGrads' (reproducible mode with uneven counts).
std::unique_ptr<GradReduction> make_grad_reduction(const GradContext& c, const ParallelConfig& cfg, int ep,
                                                   comm::ProcessGroup* cp = nullptr,
                                                   std::vector<model::LeafSpan> spans = {});

}  // namespace meshtrain::parallel
