#include "meshtrain/parallel/sharded_grads.h"

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

ShardedGrads::ShardedGrads(const ShardPlan& plan, model::ParameterStore& store, const UnitGroups& groups,
                           comm::ReduceOp op, std::shared_ptr<CachingAllocator> alloc, GradSyncStats& stats,
                           Tensor flat_grads, std::vector<int64_t> unit_offset)
    : plan_(plan),
      store_(store),
      groups_(groups),
      op_(op),
      alloc_(std::move(alloc)),
      stats_(stats),
      flat_(std::move(flat_grads)),
      offset_(std::move(unit_offset)),
      shard_(size_t(plan.num_units())),
      full_(size_t(plan.num_units())),
      staging_(size_t(plan.num_units())),
      work_(size_t(plan.num_units())),
      window_of_(size_t(plan.num_units()), -1) {
  if (plan_.shards_grads())
    for (int u = 0; u < plan_.num_units(); ++u)
      shard_[size_t(u)] = Tensor::zeros(Shape{plan_.unit(u).shard}, store_.precision().grad_accum, alloc_,
                                        MemCategory::Grads);
}

ShardedGrads::~ShardedGrads() {
  for (auto& w : work_)
    if (w.valid()) try { w.wait(); } catch (...) {}
}

Tensor ShardedGrads::owned(int u) {
  const UnitShard& s = plan_.unit(u);
  if (plan_.shards_grads()) return shard_[size_t(u)];
  return flat_.flat_slice(offset_[size_t(u)] + s.owned_begin, offset_[size_t(u)] + s.owned_end);
}

void ShardedGrads::complete(int u) {
  if (staging_[size_t(u)].defined()) {
    const UnitShard& s = plan_.unit(u);
    const Tensor dst = owned(u);
    kernels::kernels_for(dst).convert(dst, staging_[size_t(u)].flat_slice(s.owned_begin, s.owned_end));
    staging_[size_t(u)] = Tensor();
  }
  if (plan_.shards_grads()) full_[size_t(u)] = Tensor();
}

void ShardedGrads::reap() {
  for (size_t u = 0; u < work_.size(); ++u)
    if (work_[u].valid() && work_[u].is_completed()) {
      work_[u].wait();  // rethrows a failure
      stats_.comm_s += work_[u].in_flight_seconds();  // as wait_timed counts it
      work_[u] = comm::Work();
      complete(int(u));
    }
}

void ShardedGrads::prepare(int u) {
  if (!plan_.shards_grads()) return;
  reap();
  if (window_of_[size_t(u)] == window_ && full_[size_t(u)].defined()) return;
  if (work_[size_t(u)].valid()) {
    wait_timed(work_[size_t(u)], stats_);
    complete(u);
  }
  full_[size_t(u)] = Tensor::empty(Shape{plan_.unit(u).padded}, store_.precision().grad_accum, alloc_,
                                   MemCategory::Comm);
  window_of_[size_t(u)] = window_;
  store_.bind_unit_grads_lazily(u, full_[size_t(u)]);
}

void ShardedGrads::reduce(int u) {
  const UnitShard& s = plan_.unit(u);
  const DType dt = store_.precision().grad_reduce;
  // Stage 2/3: prepared and settled by the caller (DataParallel::reduce_grads),
  // also for a unit no backward touched this window (it reduces zeros).
  MT_CHECK(!plan_.shards_grads() || full_[size_t(u)].defined(), "unit ", u, " reduced without its gradient buffer");
  if (dt != store_.precision().grad_accum) {
    // Narrower on the wire: stage, reduce-scatter in place, convert back on completion.
    const Tensor full = plan_.shards_grads() ? full_[size_t(u)] : flat_.flat_slice(offset_[size_t(u)], offset_[size_t(u)] + s.padded);
    staging_[size_t(u)] = Tensor::empty(Shape{s.padded}, dt, alloc_, MemCategory::Comm);
    kernels::kernels_for(full).convert(staging_[size_t(u)], full);
    char* base = static_cast<char*>(staging_[size_t(u)].raw());
    work_[size_t(u)] =
        groups_.of(u).ireduce_scatter(base, base + size_t(s.owned_begin) * dtype_size(dt), size_t(s.padded), dt, op_);
    if (plan_.shards_grads()) store_.bind_unit_grads(u, Tensor());
  } else if (!plan_.shards_grads()) {
    char* base = static_cast<char*>(flat_.raw()) + size_t(offset_[size_t(u)]) * dtype_size(dt);
    work_[size_t(u)] =
        groups_.of(u).ireduce_scatter(base, base + size_t(s.owned_begin) * dtype_size(dt), size_t(s.padded), dt, op_);
  } else {
    work_[size_t(u)] =
        groups_.of(u).ireduce_scatter(full_[size_t(u)].raw(), shard_[size_t(u)].raw(), size_t(s.padded), dt, op_);
    store_.bind_unit_grads(u, Tensor());
  }
  stats_.buckets += 1;
  stats_.bytes += s.padded * int64_t(dtype_size(dt));
}

void ShardedGrads::wait_all() {
  for (int u = 0; u < plan_.num_units(); ++u) {
    if (work_[size_t(u)].valid()) {
      wait_timed(work_[size_t(u)], stats_);
      complete(u);
    }
    if (plan_.shards_grads()) {
      full_[size_t(u)] = Tensor();
      store_.bind_unit_grads(u, Tensor());
    }
  }
}

}  // namespace meshtrain::parallel
