#include "meshtrain/parallel/data_parallel.h"

#include <chrono>
#include <cstring>

#include "meshtrain/kernels/cpu/elementwise.h"

namespace meshtrain::parallel {

namespace {
using Clock = std::chrono::steady_clock;
template <typename T>
T* ptr(const Tensor& t) {
  return t.template data<T>();
}
}  // namespace

template <typename T>
DataParallel<T>::DataParallel(model::Transformer<T>& model, comm::ProcessGroup& dp, const ParallelConfig& cfg,
                              const optim::OptimizerConfig& opt, const std::shared_ptr<CachingAllocator>& alloc)
    : model_(model),
      dp_(dp),
      cfg_(cfg),
      alloc_(alloc),
      plan_(model.params().spec(), dp.size(), dp.rank(), cfg.zero_stage),
      nu_(plan_.num_units()),
      flat_offset_(size_t(nu_)),
      full_params_(size_t(nu_)),
      param_shard_(size_t(nu_)),
      grad_shard_(size_t(nu_)),
      gathered_(size_t(nu_)),
      gather_work_(size_t(nu_)),
      full_grad_(size_t(nu_)),
      reduce_work_(size_t(nu_)),
      grad_window_(size_t(nu_), -1),
      bucket_of_(size_t(nu_), 0) {
  auto& ps = model_.params();
  const auto& spec = ps.spec();
  const uint64_t seed = model_.config().seed;
  const DType dt = dtype_of<T>;
  // Parameters: full padded buffers (stage 0-2) or the owned shard (stage 3),
  // initialized from (seed, name, index) so every layout starts identical.
  for (int u = 0; u < nu_; ++u) {
    const UnitShard& s = plan_.unit(u);
    if (!plan_.shards_params()) {
      full_params_[u] = Tensor::zeros(Shape{s.padded}, dt, alloc_, MemCategory::Params);
      ps.bind_unit_values(u, full_params_[u]);
    } else {
      param_shard_[u] = Tensor::zeros(Shape{s.shard}, dt, alloc_, MemCategory::Params);
      for (const OwnedPiece& p : plan_.owned_pieces(u))
        model::init_param_range<T>(spec.params[size_t(p.param)], seed, p.param_begin, p.param_end - p.param_begin,
                                   ptr<T>(param_shard_[u]) + (p.unit_offset - s.owned_begin));
    }
  }
  if (!plan_.shards_params()) ps.initialize(seed);
  // Gradients: one contiguous buffer of padded units (stage 0/1, so buckets
  // are contiguous ranges) or persistent owned shards (stage 2/3).
  if (!plan_.shards_grads()) {
    flat_grads_ = Tensor::zeros(Shape{plan_.padded_total()}, dt, alloc_, MemCategory::Grads);
    int64_t off = 0;
    for (int u = 0; u < nu_; ++u) {
      flat_offset_[u] = off;
      ps.bind_unit_grads(u, flat_grads_.flat_slice(off, off + plan_.unit(u).padded));
      off += plan_.unit(u).padded;
    }
  } else {
    for (int u = 0; u < nu_; ++u)
      grad_shard_[u] = Tensor::zeros(Shape{plan_.unit(u).shard}, dt, alloc_, MemCategory::Grads);
  }
  // Optimizer over the owned pieces of every parameter.
  std::vector<int64_t> moment_numel;
  std::vector<typename optim::AdamW<T>::Slice> slices;
  for (int u = 0; u < nu_; ++u) {
    const UnitShard& s = plan_.unit(u);
    moment_numel.push_back(plan_.owned_numel(u));
    for (const OwnedPiece& p : plan_.owned_pieces(u)) {
      const int64_t local = p.unit_offset - s.owned_begin;
      slices.push_back({owned_params_mutable(u) + local, owned_grad(u) + local, u, local,
                        p.param_end - p.param_begin, spec.params[size_t(p.param)].weight_decay});
    }
  }
  adamw_ = std::make_unique<optim::AdamW<T>>(opt, moment_numel, slices, alloc_);
  // DDP buckets: whole units in reverse order, closed once they reach bucket_mb.
  const int64_t limit = int64_t(cfg_.bucket_mb * 1024 * 1024);
  for (int u = nu_ - 1; u >= 0; --u) {
    if (buckets_.empty() || int64_t(sizeof(T)) * (flat_offset_[buckets_.back().hi] + plan_.unit(buckets_.back().hi).padded -
                                                  flat_offset_[buckets_.back().lo]) >= limit)
      buckets_.push_back({u, u, 0, {}});
    buckets_.back().lo = u;
    bucket_of_[u] = int(buckets_.size()) - 1;
  }
  install_hooks();
}

template <typename T>
DataParallel<T>::~DataParallel() {
  // Never leave a collective writing into freed memory.
  for (auto* works : {&gather_work_, &reduce_work_})
    for (auto& w : *works)
      if (w.valid()) try { w.wait(); } catch (...) {}
  for (auto& b : buckets_)
    if (b.work.valid()) try { b.work.wait(); } catch (...) {}
  model_.set_hooks({});
}

template <typename T>
double DataParallel<T>::loss_coefficient(int64_t N) const {
  // (29.4): an averaging collective divides by R, so each replica scales by R/N.
  return (cfg_.grad_reduce == GradReduce::Avg ? double(dp_.size()) : 1.0) / double(N);
}

template <typename T>
void DataParallel<T>::install_hooks() {
  model::UnitHooks h;
  h.before_forward = [this](int u) { on_before_forward(u); };
  h.after_forward = [this](int u) { on_after_forward(u); };
  h.before_backward = [this](int u) { on_before_backward(u); };
  h.grads_ready = [this](int u) { on_grads_ready(u); };
  model_.set_hooks(std::move(h));
}

template <typename T>
void DataParallel<T>::wait_timed(comm::Work& w) {
  const auto t0 = Clock::now();
  w.wait();
  stats_.exposed_s += std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.comm_s += w.busy_seconds();
  w = comm::Work();
}

template <typename T>
T* DataParallel<T>::owned_grad(int u) {
  if (plan_.shards_grads()) return ptr<T>(grad_shard_[u]);
  return ptr<T>(flat_grads_) + flat_offset_[u] + plan_.unit(u).owned_begin;
}

template <typename T>
const T* DataParallel<T>::owned_params(int u) const {
  return plan_.shards_params() ? ptr<T>(param_shard_[u]) : ptr<T>(full_params_[u]) + plan_.unit(u).owned_begin;
}

template <typename T>
T* DataParallel<T>::owned_params_mutable(int u) {
  return const_cast<T*>(owned_params(u));
}

template <typename T>
T* DataParallel<T>::param_at(int u, int64_t unit_offset) {
  const UnitShard& s = plan_.unit(u);
  if (!plan_.shards_params()) return ptr<T>(full_params_[u]) + unit_offset;
  MT_CHECK(unit_offset >= s.owned_begin && unit_offset < s.owned_end, "unit ", u, " offset ", unit_offset,
           " is not in this rank's shard");
  return ptr<T>(param_shard_[u]) + (unit_offset - s.owned_begin);
}

template <typename T>
T* DataParallel<T>::moment_at(int which, int u, int64_t unit_offset) {
  const UnitShard& s = plan_.unit(u);
  MT_CHECK(unit_offset >= s.owned_begin && unit_offset < s.owned_end, "unit ", u, " offset ", unit_offset,
           " is not in this rank's optimizer shard");
  return moment(which, u) + (unit_offset - s.owned_begin);
}

template <typename T>
T* DataParallel<T>::moment(int which, int u) {
  return ptr<T>(which == 0 ? adamw_->m(u) : adamw_->v(u));
}

// ---- stage 3: gather / prefetch / release ---------------------------------

template <typename T>
void DataParallel<T>::prefetch(int u) {
  if (!plan_.shards_params() || u < 0 || u >= nu_ || gathered_[u].defined()) return;
  gathered_[u] = Tensor::empty(Shape{plan_.unit(u).padded}, dtype_of<T>, alloc_, MemCategory::Gathered);
  gather_work_[u] = dp_.iall_gather(ptr<T>(param_shard_[u]), ptr<T>(gathered_[u]), size_t(plan_.unit(u).padded),
                                    dtype_of<T>);
}

template <typename T>
void DataParallel<T>::ensure_gathered(int u) {
  prefetch(u);  // no-op when already gathered or in flight
  if (gather_work_[u].valid()) {
    wait_timed(gather_work_[u]);
    model_.params().bind_unit_values(u, gathered_[u]);
  }
}

template <typename T>
void DataParallel<T>::release(int u) {
  if (!plan_.shards_params() || !gathered_[u].defined()) return;
  if (gather_work_[u].valid()) wait_timed(gather_work_[u]);
  gathered_[u] = Tensor();
  model_.params().bind_unit_values(u, Tensor());
}

template <typename T>
void DataParallel<T>::release_gathered() {
  for (int u = 0; u < nu_; ++u) release(u);
}

// ---- hooks ----------------------------------------------------------------

template <typename T>
void DataParallel<T>::on_before_forward(int u) {
  if (!plan_.shards_params()) return;
  ensure_gathered(u);
  prefetch(u + 1);
}

template <typename T>
void DataParallel<T>::on_after_forward(int u) {
  // The last unit's backward comes next: keep it.
  if (plan_.shards_params() && cfg_.reshard_after_forward && u != nu_ - 1) release(u);
}

template <typename T>
void DataParallel<T>::on_before_backward(int u) {
  reap_transient();
  if (plan_.shards_params()) {
    ensure_gathered(u);
    prefetch(u - 1);
  }
  if (plan_.shards_grads()) ensure_full_grad(u);
}

template <typename T>
void DataParallel<T>::on_grads_ready(int u) {
  if (last_micro_ && cfg_.overlap) launch_reduction(u);
  if (plan_.shards_params()) release(u);
}

// ---- gradients --------------------------------------------------------------

template <typename T>
void DataParallel<T>::ensure_full_grad(int u) {
  if (grad_window_[u] == window_ && full_grad_[u].defined()) return;
  if (reduce_work_[u].valid()) wait_timed(reduce_work_[u]);
  full_grad_[u] = Tensor::zeros(Shape{plan_.unit(u).padded}, dtype_of<T>, alloc_, MemCategory::Comm);
  grad_window_[u] = window_;
  model_.params().bind_unit_grads(u, full_grad_[u]);
}

template <typename T>
void DataParallel<T>::launch_bucket(size_t b) {
  Bucket& k = buckets_[b];
  const int64_t begin = flat_offset_[k.lo], end = flat_offset_[k.hi] + plan_.unit(k.hi).padded;
  T* p = ptr<T>(flat_grads_) + begin;
  const auto op = cfg_.grad_reduce == GradReduce::Avg ? comm::ReduceOp::Avg : comm::ReduceOp::Sum;
  k.work = dp_.iall_reduce(p, p, size_t(end - begin), dtype_of<T>, op);
  stats_.buckets += 1;
  stats_.bytes += (end - begin) * int64_t(sizeof(T));
}

template <typename T>
void DataParallel<T>::launch_reduction(int u) {
  const auto op = cfg_.grad_reduce == GradReduce::Avg ? comm::ReduceOp::Avg : comm::ReduceOp::Sum;
  const UnitShard& s = plan_.unit(u);
  if (plan_.stage() == 0) {
    Bucket& k = buckets_[size_t(bucket_of_[u])];
    if (++k.ready == k.hi - k.lo + 1) launch_bucket(size_t(bucket_of_[u]));
    return;
  }
  if (plan_.stage() == 1) {
    T* base = ptr<T>(flat_grads_) + flat_offset_[u];
    reduce_work_[u] = dp_.ireduce_scatter(base, base + s.owned_begin, size_t(s.padded), dtype_of<T>, op);
  } else {
    if (!full_grad_[u].defined()) ensure_full_grad(u);  // a unit no micro-batch touched
    reduce_work_[u] =
        dp_.ireduce_scatter(ptr<T>(full_grad_[u]), ptr<T>(grad_shard_[u]), size_t(s.padded), dtype_of<T>, op);
    model_.params().bind_unit_grads(u, Tensor());
  }
  stats_.buckets += 1;
  stats_.bytes += s.padded * int64_t(sizeof(T));
}

template <typename T>
void DataParallel<T>::reap_transient() {
  if (!plan_.shards_grads()) return;
  for (int u = 0; u < nu_; ++u)
    if (reduce_work_[u].valid() && reduce_work_[u].is_completed()) {
      reduce_work_[u].wait();  // rethrows a failure
      stats_.comm_s += reduce_work_[u].busy_seconds();
      reduce_work_[u] = comm::Work();
      full_grad_[u] = Tensor();
    }
}

template <typename T>
void DataParallel<T>::begin_window(int64_t micro_batches) {
  ++window_;
  stats_ = {};
  micro_batches_ = micro_batches;
  last_micro_ = micro_batches == 1;
  for (auto& k : buckets_) k.ready = 0;
  if (!plan_.shards_grads()) flat_grads_.zero_();
}

template <typename T>
void DataParallel<T>::begin_micro(int64_t j) {
  // Gradients accumulate locally; only the last micro-step communicates.
  last_micro_ = j == micro_batches_ - 1;
}

template <typename T>
void DataParallel<T>::finish_grads() {
  if (!cfg_.overlap)
    for (int u = nu_ - 1; u >= 0; --u) launch_reduction(u);
  for (auto& k : buckets_)
    if (k.work.valid()) wait_timed(k.work);
  for (int u = 0; u < nu_; ++u) {
    if (reduce_work_[u].valid()) wait_timed(reduce_work_[u]);
    if (plan_.shards_grads()) {
      full_grad_[u] = Tensor();
      model_.params().bind_unit_grads(u, Tensor());
    }
  }
}

template <typename T>
double DataParallel<T>::grad_sum_squares() {
  std::vector<double> local;
  std::vector<int64_t> unit_block0;  // first block of unit u within a rank's list
  for (int u = 0; u < nu_; ++u) {
    unit_block0.push_back(int64_t(local.size()));
    const T* g = owned_grad(u);
    for (int64_t b = 0; b < plan_.owned_numel(u); b += kNormBlock)
      local.push_back(kernels::sum_squares<T>(g + b, kNormBlock));
  }
  double total = 0;
  if (!plan_.shards_optimizer() || dp_.size() == 1) {
    for (double v : local) total += v;
    return total;
  }
  // Canonical order: unit by unit, blocks in global order (rank-major inside
  // a unit), identical to the unsharded sum.
  const size_t per_rank = local.size(), R = size_t(dp_.size());
  std::vector<double> all(per_rank * R);
  dp_.all_gather(local.data(), all.data(), all.size(), DType::F64);
  for (int u = 0; u < nu_; ++u) {
    const int64_t nb = plan_.owned_numel(u) / kNormBlock;
    for (size_t r = 0; r < R; ++r)
      for (int64_t b = 0; b < nb; ++b) total += all[r * per_rank + size_t(unit_block0[u] + b)];
  }
  return total;
}

template <typename T>
void DataParallel<T>::step(double lr, double grad_scale) {
  adamw_->step(lr, grad_scale);
  publish_params();
}

template <typename T>
void DataParallel<T>::publish_params() {
  if (plan_.stage() != 1 && plan_.stage() != 2) return;
  std::vector<comm::Work> works;
  for (int u = 0; u < nu_; ++u) {
    const UnitShard& s = plan_.unit(u);
    T* base = ptr<T>(full_params_[u]);
    works.push_back(dp_.iall_gather(base + s.owned_begin, base, size_t(s.padded), dtype_of<T>));
  }
  for (auto& w : works) wait_timed(w);
}

template <typename T>
std::vector<T> DataParallel<T>::gather_unit_params(int u) {
  const UnitShard& s = plan_.unit(u);
  if (!plan_.shards_params()) {
    const T* p = ptr<T>(full_params_[u]);
    return std::vector<T>(p, p + s.numel);
  }
  std::vector<T> full(size_t(s.padded));
  dp_.all_gather(ptr<T>(param_shard_[u]), full.data(), full.size(), dtype_of<T>);
  full.resize(size_t(s.numel));
  return full;
}

template <typename T>
std::vector<T> DataParallel<T>::gather_unit_grads(int u) {
  const UnitShard& s = plan_.unit(u);
  if (!plan_.shards_optimizer()) {
    const T* g = owned_grad(u);
    return std::vector<T>(g, g + s.numel);
  }
  std::vector<T> full(size_t(s.padded));
  dp_.all_gather(owned_grad(u), full.data(), full.size(), dtype_of<T>);
  full.resize(size_t(s.numel));
  return full;
}

template <typename T>
std::vector<T> DataParallel<T>::gather_params() {
  std::vector<T> all;
  for (int u = 0; u < nu_; ++u) {
    const auto v = gather_unit_params(u);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

template <typename T>
std::vector<T> DataParallel<T>::gather_grads() {
  std::vector<T> all;
  for (int u = 0; u < nu_; ++u) {
    const auto v = gather_unit_grads(u);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

template class DataParallel<float>;
template class DataParallel<double>;

}  // namespace meshtrain::parallel
