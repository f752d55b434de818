// DDP gradient buckets (stage 0, docs/math.md, "Rule: overlap is measured"): whole
// units of the flat gradient buffer in the order backward completes them
// (ShardPlan::segment_order reversed), closed once they reach bucket_mb or when
// the next unit sums over another group (a block's routed experts: unit_groups.h);
// a bucket is all-reduced as soon as every unit in it is reported complete for the
// window, so reductions overlap the rest of backward. A narrower reduce type
// (grad_reduce bf16) reduces a converted copy and converts the sum back.
#pragma once

#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/parallel/shard_plan.h"
#include "meshtrain/parallel/sync_stats.h"
#include "meshtrain/parallel/unit_groups.h"

namespace meshtrain::parallel {

// The buckets' layout, a pure function of the plan (the planner's recorded
// step forms the same buckets): contiguous ranges of whole units of the flat
// gradient buffer at unit_offset (ShardPlan::flat_offsets), in the order
// backward completes them, closed once they reach bucket_mb and, when
// experts_apart, where the next unit is on the other side of the dense /
// expert-unit line.
struct BucketRange {
  std::vector<int> units;  // in completion order
  int64_t begin = 0, end = 0;
  bool experts = false;
};
std::vector<BucketRange> bucket_ranges(const ShardPlan& plan, const std::vector<int64_t>& unit_offset,
                                       double bucket_mb, int64_t element_bytes, bool experts_apart);

class GradBuckets {
 public:
  // flat_grads holds every held unit's padded gradient at unit_offset[u].
  GradBuckets(const ShardPlan& plan, const Tensor& flat_grads, const std::vector<int64_t>& unit_offset,
              double bucket_mb, const UnitGroups& groups, comm::ReduceOp op, DType reduce_dtype,
              std::shared_ptr<CachingAllocator> alloc, GradSyncStats& stats);
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  void begin_window();
  void unit_ready(int u);  // launches u's bucket when it is the bucket's last
  void wait_all();
  int count() const { return int(buckets_.size()); }

 private:
  struct Bucket {
    BucketRange range;
    comm::ProcessGroup* group = nullptr;
    int ready = 0;
    comm::Work work;
    Tensor staging;  // the bucket in the reduce type while in flight
  };
  Tensor flat_;
  DType reduce_dtype_;
  std::shared_ptr<CachingAllocator> alloc_;
  comm::ReduceOp op_;
  GradSyncStats& stats_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
};

}  // namespace meshtrain::parallel
