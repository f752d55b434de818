// Data parallelism with ZeRO/FSDP state sharding, one code path for every
// stage and for R = 1 (a group of size 1 communicates nothing):
//   stage 0 (DDP): full params, grads and optimizer state; gradients packed
//     into buckets of whole units, each all-reduced as soon as its last unit's
//     grads are final (reverse layer order), on the last micro-step only.
//   stage 1 (29.8): optimizer state for the owned shard; grads reduce-scattered
//     per unit, owners update, updated shards all-gathered.
//   stage 2 (29.9): only the owned gradient shard persists; a unit's full
//     gradient is a transient buffer, reduce-scattered when final and freed.
//   stage 3 (29.10): parameters sharded at rest, all-gathered just before a
//     unit computes (next unit prefetched), freed after forward when
//     reshard_after_forward (gathered again in backward) and after backward.
// Within a window gradients accumulate locally (no communication before the
// last micro-step), so every stage sums in the order sum_r (sum_j g_rj) and
// stage changes alone are bitwise identical on the threads backend.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/parallel/parallel_config.h"
#include "meshtrain/parallel/shard_plan.h"

namespace meshtrain::parallel {

struct GradSyncStats {
  double comm_s = 0;     // time the gradient/parameter collectives took (overlapped or not)
  double exposed_s = 0;  // time this rank waited on gradient/parameter communication
  int buckets = 0;       // gradient collectives launched this step
  int64_t bytes = 0;     // gradient bytes reduced this step
};

template <typename T>
class DataParallel {
 public:
  DataParallel(model::Transformer<T>& model, comm::ProcessGroup& dp, const ParallelConfig& cfg,
               const optim::OptimizerConfig& opt, const std::shared_ptr<CachingAllocator>& alloc);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const ShardPlan& plan() const { return plan_; }
  const ParallelConfig& config() const { return cfg_; }
  // Loss coefficient for a window with N supervised targets (29.4).
  double loss_coefficient(int64_t N) const;

  // Window protocol (Algorithm 29.1 step 3-4).
  void begin_window(int64_t micro_batches);
  void begin_micro(int64_t j);
  void finish_grads();  // waits for every reduction (the tail)
  const GradSyncStats& sync_stats() const { return stats_; }

  // sum of squares of the reduced gradient, in canonical block order
  // (collective over dp when gradients are sharded).
  double grad_sum_squares();
  // Owners update their shard, then publish parameters (stage 1, 2).
  void step(double lr, double grad_scale);
  int64_t optimizer_steps() const { return adamw_->steps_taken(); }
  optim::AdamW<T>& optimizer() { return *adamw_; }
  // Frees gathered units (stage 3) after forward-only passes.
  void release_gathered();

  // Full logical values on every rank (collective): verification, export.
  std::vector<T> gather_unit_params(int u);
  std::vector<T> gather_unit_grads(int u);  // after finish_grads()
  // All units concatenated in unit order.
  std::vector<T> gather_params();
  std::vector<T> gather_grads();
  // This rank's owned slice of unit u: params, reduced grads, moments.
  const T* owned_params(int u) const;
  T* owned_params_mutable(int u);
  // Parameter element at flat `unit_offset` of unit u (full buffers under
  // stage 0-2, the owned shard under stage 3) and Adam moment `which`
  // (0 = m, 1 = v) of an owned element: checkpoint reads and writes.
  T* param_at(int u, int64_t unit_offset);
  T* moment_at(int which, int u, int64_t unit_offset);
  T* owned_grad(int u);  // owned slice of the reduced gradient (after finish_grads)
  T* moment(int which, int u);  // which: 0 = m, 1 = v
  void publish_params();  // all-gather owned slices into full buffers (stage 1, 2)

 private:
  void install_hooks();
  void on_before_forward(int u);
  void on_after_forward(int u);
  void on_before_backward(int u);
  void on_grads_ready(int u);
  void ensure_gathered(int u);
  void prefetch(int u);
  void release(int u);
  void ensure_full_grad(int u);
  void launch_reduction(int u);
  void launch_bucket(size_t b);
  void wait_timed(comm::Work& w);
  void reap_transient();

  model::Transformer<T>& model_;
  comm::ProcessGroup& dp_;
  ParallelConfig cfg_;
  std::shared_ptr<CachingAllocator> alloc_;
  ShardPlan plan_;
  std::unique_ptr<optim::AdamW<T>> adamw_;
  int nu_;

  // Persistent state (per the stage).
  Tensor flat_grads_;                  // stage 0/1: all units' full grads, padded, contiguous
  std::vector<int64_t> flat_offset_;   // unit offsets in flat_grads_
  std::vector<Tensor> full_params_;    // stage 0-2: padded full values per unit
  std::vector<Tensor> param_shard_;    // stage 3
  std::vector<Tensor> grad_shard_;     // stage 2/3

  // Transient state.
  std::vector<Tensor> gathered_;       // stage 3 gathered units
  std::vector<comm::Work> gather_work_;
  std::vector<Tensor> full_grad_;      // stage 2/3 transient full grads
  std::vector<comm::Work> reduce_work_;
  std::vector<int64_t> grad_window_;   // window id a transient grad belongs to

  struct Bucket {
    int lo = 0, hi = 0;  // units [lo, hi]
    int ready = 0;
    comm::Work work;
  };
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;

  int64_t window_ = 0;
  int64_t micro_batches_ = 1;
  bool last_micro_ = true;
  GradSyncStats stats_;
};

}  // namespace meshtrain::parallel
