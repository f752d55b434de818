#include "meshtrain/parallel/grad_buckets.h"

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

std::vector<BucketRange> bucket_ranges(const ShardPlan& plan, const std::vector<int64_t>& unit_offset,
                                       double bucket_mb, int64_t element_bytes, bool experts_apart) {
  const int64_t limit = int64_t(bucket_mb * 1024 * 1024);
  std::vector<BucketRange> out;
  const std::vector<int> order = plan.segment_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int u = *it;
    const int64_t n = plan.unit(u).padded;
    if (n == 0) continue;  // another pipeline stage's unit
    const bool experts = experts_apart && plan.unit(u).experts;
    if (out.empty() || (out.back().end - out.back().begin) * element_bytes >= limit || out.back().experts != experts)
      out.push_back({{}, unit_offset[size_t(u)] + n, unit_offset[size_t(u)] + n, experts});
    BucketRange& b = out.back();
    MT_CHECK(unit_offset[size_t(u)] + n == b.begin, "unit ", u, " is not stored right before its bucket");
    b.units.push_back(u);
    b.begin = unit_offset[size_t(u)];
  }
  return out;
}

GradBuckets::GradBuckets(const ShardPlan& plan, const Tensor& flat_grads, const std::vector<int64_t>& unit_offset,
                         double bucket_mb, const UnitGroups& groups, comm::ReduceOp op, DType reduce_dtype,
                         std::shared_ptr<CachingAllocator> alloc, GradSyncStats& stats)
    : flat_(flat_grads),
      reduce_dtype_(reduce_dtype),
      alloc_(std::move(alloc)),
      op_(op),
      stats_(stats),
      bucket_of_(size_t(plan.num_units()), -1) {
  const bool experts_apart = &groups.experts() != &groups.data();
  for (BucketRange& r : bucket_ranges(plan, unit_offset, bucket_mb, int64_t(dtype_size(flat_.dtype())), experts_apart)) {
    for (int u : r.units) bucket_of_[size_t(u)] = int(buckets_.size());
    comm::ProcessGroup* group = &(r.experts ? groups.experts() : groups.data());
    buckets_.push_back({std::move(r), group, 0, {}, {}});
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
  MT_CHECK(b.ready < int(b.range.units.size()), "unit ", u, " reported complete twice in one window");
  if (++b.ready < int(b.range.units.size())) return;
  Tensor range = flat_.flat_slice(b.range.begin, b.range.end);
  if (reduce_dtype_ != flat_.dtype()) {
    b.staging = Tensor::empty(range.shape(), reduce_dtype_, alloc_, MemCategory::Comm);
    kernels::kernels_for(range).convert(b.staging, range);
    range = b.staging;
  }
  b.work = b.group->iall_reduce(range.raw(), range.raw(), size_t(b.range.end - b.range.begin), range.dtype(), op_);
  stats_.buckets += 1;
  stats_.bytes += (b.range.end - b.range.begin) * int64_t(dtype_size(range.dtype()));
}

void GradBuckets::wait_all() {
  for (auto& b : buckets_) {
    if (b.work.valid()) wait_timed(b.work, stats_);
    if (b.staging.defined()) {
      const Tensor range = flat_.flat_slice(b.range.begin, b.range.end);
      kernels::kernels_for(range).convert(range, b.staging);
      b.staging = Tensor();
    }
    MT_CHECK(b.ready == 0 || b.ready == int(b.range.units.size()), "a gradient bucket was left incomplete");
  }
}

}  // namespace meshtrain::parallel
