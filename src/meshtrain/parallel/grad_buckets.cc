#include "meshtrain/parallel/grad_buckets.h"

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

GradBuckets::GradBuckets(const ShardPlan& plan, const Tensor& flat_grads, const std::vector<int64_t>& unit_offset,
                         double bucket_mb, const UnitGroups& groups, comm::ReduceOp op, DType reduce_dtype,
                         std::shared_ptr<CachingAllocator> alloc, GradSyncStats& stats)
    : flat_(flat_grads),
      reduce_dtype_(reduce_dtype),
      alloc_(std::move(alloc)),
      op_(op),
      stats_(stats),
      bucket_of_(size_t(plan.num_units()), -1) {
  const int64_t limit = int64_t(bucket_mb * 1024 * 1024);
  const int64_t esize = int64_t(dtype_size(flat_.dtype()));
  const std::vector<int> order = plan.segment_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int u = *it;
    const int64_t n = plan.unit(u).padded;
    if (n == 0) continue;  // another pipeline stage's unit
    comm::ProcessGroup* group = &groups.of(u);
    if (buckets_.empty() || (buckets_.back().end - buckets_.back().begin) * esize >= limit ||
        buckets_.back().group != group)
      buckets_.push_back({{}, group, unit_offset[size_t(u)] + n, unit_offset[size_t(u)] + n, 0, {}, {}});
    Bucket& b = buckets_.back();
    MT_CHECK(unit_offset[size_t(u)] + n == b.begin, "unit ", u, " is not stored right before its bucket");
    b.units.push_back(u);
    b.begin = unit_offset[size_t(u)];
    bucket_of_[size_t(u)] = int(buckets_.size()) - 1;
  }
}

GradBuckets::~GradBuckets() {
  for (auto& b : buckets_)
    if (b.work.valid()) try { b.work.wait(); } catch (...) {}
}

void GradBuckets::begin_window() {
  for (auto& b : buckets_) b.ready = 0;
}

void GradBuckets::unit_ready(int u) {
  MT_CHECK(bucket_of_[size_t(u)] >= 0, "unit ", u, " has no gradient bucket on this rank");
  Bucket& b = buckets_[size_t(bucket_of_[size_t(u)])];
  MT_CHECK(b.ready < int(b.units.size()), "unit ", u, " reported complete twice in one window");
  if (++b.ready < int(b.units.size())) return;
  Tensor range = flat_.flat_slice(b.begin, b.end);
  if (reduce_dtype_ != flat_.dtype()) {
    b.staging = Tensor::empty(range.shape(), reduce_dtype_, alloc_, MemCategory::Comm);
    kernels::kernels_for(range).convert(b.staging, range);
    range = b.staging;
  }
  b.work = b.group->iall_reduce(range.raw(), range.raw(), size_t(b.end - b.begin), range.dtype(), op_);
  stats_.buckets += 1;
  stats_.bytes += (b.end - b.begin) * int64_t(dtype_size(range.dtype()));
}

void GradBuckets::wait_all() {
  for (auto& b : buckets_) {
    if (b.work.valid()) wait_timed(b.work, stats_);
    if (b.staging.defined()) {
      const Tensor range = flat_.flat_slice(b.begin, b.end);
      kernels::kernels_for(range).convert(range, b.staging);
      b.staging = Tensor();
    }
    MT_CHECK(b.ready == 0 || b.ready == int(b.units.size()), "a gradient bucket was left incomplete");
  }
}

}  // namespace meshtrain::parallel
