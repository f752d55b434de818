#include "meshtrain/parallel/data_parallel.h"

#include <chrono>

#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/parallel/tree_reduce.h"

namespace meshtrain::parallel {

DataParallel::DataParallel(model::Transformer& model, const LayoutPlan& plan, const RankGroups& groups,
                           const ParallelConfig& cfg, const optim::OptimizerConfig& opt,
                           const std::shared_ptr<CachingAllocator>& alloc)
    : model_(model),
      layout_(plan),
      dp_(*groups.data),
      model_group_(*groups.model),
      expert_model_(*groups.expert_model),
      groups_(plan.shards(), *groups.data, groups.edp),
      norm_(plan, groups_, model_group_, expert_model_, alloc),
      tie_(groups.tie.get()),
      cfg_(cfg),
      alloc_(alloc),
      nu_(plan.shards().num_units()),
      full_params_(size_t(nu_)),
      masters_(size_t(nu_)),
      flat_offset_(size_t(nu_), 0),
      tp_sums_(plan, groups, alloc) {
  const ShardPlan& sp = plan.shards();
  MT_REQUIRE(ConfigError, dp_.size() == sp.size(), "the data-parallel group has ", dp_.size(),
             " ranks but the layout plan shards over ", sp.size());
  MT_CHECK(model_.params().spec().params.size() == plan.spec().params.size(),
           "the model was not built from the layout plan's spec");
  MT_CHECK(plan.tied_units().empty() || (tie_ && tie_->size() == 2), "a tied weight on two pipeline stages needs "
           "the group of those two ranks");
  auto& store = model_.params();
  const PrecisionPolicy& prec = store.precision();
  const uint64_t seed = model_.config().seed;
  // Parameters: full padded buffers (stage 0-2) or the owned shard (stage 3),
  // initialized from (seed, name, global index) so every layout starts identical.
  if (sp.shards_params()) {
    gathered_.emplace(sp, store, groups_, alloc_, stats_);
    for (int u = 0; u < nu_; ++u)
      for (const OwnedPiece& p : sp.owned_pieces(u)) {
        const int64_t local = p.unit_offset - sp.unit(u).owned_begin;
        model::init_param_range(sp.spec().params[size_t(p.param)], seed, p.param_begin,
                                gathered_->shard(u).flat_slice(local, local + (p.param_end - p.param_begin)));
      }
  } else {
    for (int u = 0; u < nu_; ++u) {
      if (sp.unit(u).padded == 0) continue;
      full_params_[size_t(u)] = Tensor::zeros(Shape{sp.unit(u).padded}, prec.params, alloc_, MemCategory::Params);
      store.bind_unit_values(u, full_params_[size_t(u)]);
    }
    store.initialize(seed);
  }
  // Master weights: f32 copies of the owned range, initialized from the
  // same (seed, name, index) values the 16-bit parameters were rounded from.
  if (prec.has_master_copy())
    for (int u = 0; u < nu_; ++u) {
      masters_[size_t(u)] = Tensor::zeros(Shape{sp.owned_numel(u)}, prec.master, alloc_, MemCategory::Optimizer);
      for (const OwnedPiece& p : sp.owned_pieces(u)) {
        const int64_t local = p.unit_offset - sp.unit(u).owned_begin;
        model::init_param_range(sp.spec().params[size_t(p.param)], seed, p.param_begin,
                                masters_[size_t(u)].flat_slice(local, local + (p.param_end - p.param_begin)));
      }
    }
  // Gradients: one contiguous buffer of padded units (stage 0/1, so buckets
  // are contiguous ranges) or persistent owned shards (stage 2/3).
  if (!sp.shards_grads()) {
    flat_grads_ = Tensor::zeros(Shape{sp.padded_total()}, prec.grad_accum, alloc_, MemCategory::Grads);
    flat_offset_ = sp.flat_offsets();  // backward completes them in reverse: contiguous buckets
    for (int u = 0; u < nu_; ++u)
      if (sp.unit(u).padded > 0)
        store.bind_unit_grads(u, flat_grads_.flat_slice(flat_offset_[size_t(u)],
                                                        flat_offset_[size_t(u)] + sp.unit(u).padded));
  }
  if (cfg_.reproducible) {
    MT_REQUIRE(ConfigError, cfg_.grad_reduce == GradReduce::Sum && prec.grad_reduce == prec.grad_accum,
               "training.reproducible sums gradients in its own fixed tree: use parallel.grad_reduce = \"sum\" "
               "and reduce in the gradients' type");
    // An expert's owner keeps each ep source's leaves in a lane of its own
    // (grad_tree.h); its blocks switch lanes (moe_layer.cc).
    std::vector<int> lanes(size_t(nu_), 1);
    const int ep = plan.mesh().ep;
    for (int u = 0; u < nu_; ++u)
      if (sp.unit(u).experts) lanes[size_t(u)] = ep;
    tree_.emplace(nu_, prec.grad_accum, alloc_, lanes);
    if (ep > 1)
      store.set_grad_lane_switch(
          [this](int u, int lane) { model_.params().bind_unit_grads(u, tree_->leaf(u, layout_.shards().unit(u).padded, lane)); });
  }
  if (sp.stage() == 0)
    buckets_.emplace(sp, flat_grads_, flat_offset_, cfg_.bucket_mb, groups_, reduce_op(), prec.grad_reduce, alloc_,
                     stats_);
  else
    sharded_.emplace(sp, store, groups_, reduce_op(), alloc_, stats_, flat_grads_, flat_offset_);
  // The optimizer's segments: the owned pieces of every parameter, from the plan.
  std::vector<int64_t> moment_numel;
  for (int u = 0; u < nu_; ++u) {
    moment_numel.push_back(sp.owned_numel(u));
    for (const OwnedPiece& p : sp.owned_pieces(u))
      opt_segments_.push_back({u, p.unit_offset - sp.unit(u).owned_begin, p.param_end - p.param_begin,
                               sp.spec().params[size_t(p.param)].weight_decay});
  }
  adamw_ = std::make_unique<optim::AdamW>(opt, moment_numel, prec.optimizer, alloc_);
}

DataParallel::~DataParallel() { model_.params().set_grad_lane_switch({}); }

comm::ReduceOp DataParallel::reduce_op() const {
  return cfg_.grad_reduce == GradReduce::Avg ? comm::ReduceOp::Avg : comm::ReduceOp::Sum;
}

ParamPolicy DataParallel::param_policy() const {
  return {plan().shards_params(), cfg_.reshard_after_forward, cfg_.overlap, cfg_.reproducible, cfg_.keep_gathered};
}

double DataParallel::loss_coefficient(int64_t N) const {
  return parallel::loss_coefficient(cfg_.grad_reduce, dp_.size(), N);
}

// ---- the window ---------------------------------------------------------------

void DataParallel::begin_window() {
  stats_ = {};
  if (tree_) tree_->clear();
  tp_sums_.reset_stats();
  if (buckets_) buckets_->begin_window();
  if (sharded_) sharded_->begin_window();
  if (!flat_grads_.defined()) return;
  if (tree_) return kernels::kernels_for(flat_grads_).fill(flat_grads_, 0.0);
  // The first backward write of each parameter overwrites (no pass over the
  // whole buffer); reduce_grads settles what no backward wrote. Padding
  // stays zero: nothing writes it.
  for (int u = 0; u < nu_; ++u) model_.params().zero_grads_lazily(u);
}

void DataParallel::gather(int u) {
  if (gathered_) gathered_->gather(u);
}

void DataParallel::require_params(int u) {
  if (gathered_) gathered_->require(u);
}

void DataParallel::release(int u) {
  if (gathered_) gathered_->release(u);
}

void DataParallel::release_gathered() {
  if (gathered_) gathered_->release_all();
}

void DataParallel::prepare_grads(int u) {
  if (tree_) {
    // Each micro-batch's gradient of u goes into its own leaf.
    if (!tree_->has_open_leaf(u)) model_.params().bind_unit_grads(u, tree_->leaf(u, plan().unit(u).padded));
    return;
  }
  if (sharded_) sharded_->prepare(u);
}

void DataParallel::close_leaf(int u) {
  MT_CHECK(tree_.has_value(), "CloseLeaf outside reproducible mode");
  tree_->close_leaf(u);
  model_.params().bind_unit_grads(u, Tensor());
}

void DataParallel::reduce_grads(int u) {
  if (tree_) return reduce_tree(u);
  prepare_grads(u);                 // bound (ZeRO-2/3: a unit no backward touched still sums its zeros)
  model_.params().settle_grads(u);  // what no backward wrote reads zero
  if (tp_sums_.any(u)) tp_sums_.reduce(u, model_.params().unit_grads(u));
  if (buckets_) buckets_->unit_ready(u);
  else sharded_->reduce(u);
}

void DataParallel::reduce_tree(int u) {
  const UnitShard& s = plan().unit(u);
  const Tensor root = tree_->root(u);
  if (tp_sums_.any(u)) tp_sums_.reduce(u, root);  // the window's whole gradient of u, partial over tp ranks
  const auto t0 = std::chrono::steady_clock::now();
  if (plan().stage() == 0) {
    const Tensor dst = flat_grads_.flat_slice(flat_offset_[size_t(u)], flat_offset_[size_t(u)] + s.padded);
    kernels::kernels_for(dst).copy(dst, root);
    tree_all_reduce(groups_.of(u), dst, alloc_);
  } else {
    tree_reduce_scatter(groups_.of(u), root, alloc_);  // the root is this window's scratch
    const Tensor dst = sharded_->owned(u);
    kernels::kernels_for(dst).copy(dst, root.flat_slice(s.owned_begin, s.owned_end));
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.comm_s += dt;
  stats_.exposed_s += dt;
  stats_.buckets += 1;
  stats_.bytes += s.padded * int64_t(dtype_size(root.dtype()));
}

void DataParallel::finish_grads() {
  if (buckets_) buckets_->wait_all();
  else sharded_->wait_all();
  // Averaging divides by the group's size: an expert unit's group (edp) is
  // 1/ep of the data group the loss coefficient assumes (docs/math.md (M.6), (M.7)).
  if (reduce_op() == comm::ReduceOp::Avg)
    for (int u = 0; u < nu_; ++u)
      if (groups_.of(u).size() != dp_.size() && plan().owned_numel(u) > 0) {
        const Tensor g = owned_grad(u);
        kernels::kernels_for(g).scale(g, double(groups_.of(u).size()) / double(dp_.size()));
      }
  // A tied weight's copies (first stage: embedding, head's stage: LM head)
  // sum their reduced gradients: both then step the same update. Each
  // copy's owned range is the same flat range of the same unit.
  for (int u : layout_.tied_units())
    if (plan().owned_numel(u) > 0) tie_->all_reduce(owned_grad(u), comm::ReduceOp::Sum);
}

double DataParallel::grad_sum_squares() {
  return norm_.sum_squares([this](int u) { return owned_grad(u); });
}

void DataParallel::step(double lr, double grad_scale) {
  std::vector<Tensor> params, grads, compute_copies;
  const bool master = model_.params().precision().has_master_copy();
  for (int u = 0; u < nu_; ++u) {
    params.push_back(owned_params(u));
    grads.push_back(owned_grad(u));
    if (master) compute_copies.push_back(owned_compute_params(u));
  }
  // The update writes the masters' compute copies in its own pass (what
  // refresh_params converts after a checkpoint load).
  adamw_->step(lr, grad_scale, opt_segments_, params, grads, compute_copies);
  publish_params();
}

Tensor DataParallel::owned_compute_params(int u) {
  if (plan().owned_numel(u) == 0) return Tensor();
  const UnitShard& s = plan().unit(u);
  return plan().shards_params() ? gathered_->shard(u) : full_params_[size_t(u)].flat_slice(s.owned_begin, s.owned_end);
}

void DataParallel::refresh_params() {
  if (model_.params().precision().has_master_copy())
    for (int u = 0; u < nu_; ++u) {
      const Tensor dst = owned_compute_params(u);
      if (dst.defined()) kernels::kernels_for(dst).convert(dst, masters_[size_t(u)]);
    }
  publish_params();
}

void DataParallel::publish_params() {
  if (plan().stage() != 1 && plan().stage() != 2) return;
  std::vector<comm::Work> works;
  for (int u = 0; u < nu_; ++u) {
    const UnitShard& s = plan().unit(u);
    if (s.padded == 0) continue;
    const Tensor& full = full_params_[size_t(u)];
    works.push_back(groups_.of(u).iall_gather(full.flat_slice(s.owned_begin, s.owned_end).raw(), full.raw(),
                                              size_t(s.padded), full.dtype()));
  }
  for (auto& w : works) wait_timed(w, stats_);
}

// ---- state access ---------------------------------------------------------------

Tensor DataParallel::weights(int u) {
  if (masters_[size_t(u)].defined()) return masters_[size_t(u)];
  return plan().shards_params() ? gathered_->shard(u) : full_params_[size_t(u)];
}

std::pair<int64_t, int64_t> DataParallel::weights_range(int u) const {
  const UnitShard& s = plan().unit(u);
  if (masters_[size_t(u)].defined() || plan().shards_params()) return {s.owned_begin, s.owned_end};
  return {0, s.padded};
}

Tensor DataParallel::owned_params(int u) {
  const UnitShard& s = plan().unit(u);
  if (masters_[size_t(u)].defined()) return masters_[size_t(u)];
  if (plan().shards_params()) return gathered_->shard(u);
  if (s.padded == 0) return Tensor();
  return full_params_[size_t(u)].flat_slice(s.owned_begin, s.owned_end);
}

Tensor DataParallel::owned_grad(int u) {
  const UnitShard& s = plan().unit(u);
  if (sharded_) return sharded_->owned(u);
  if (s.padded == 0) return Tensor();
  return flat_grads_.flat_slice(flat_offset_[size_t(u)] + s.owned_begin, flat_offset_[size_t(u)] + s.owned_end);
}

Tensor DataParallel::moment(int which, int u) { return which == 0 ? adamw_->m(u) : adamw_->v(u); }

namespace {
std::vector<double> to_doubles(const Tensor& t, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  if (t.dtype() == DType::F64) {
    const double* p = t.data<double>();
    std::copy(p, p + n, out.begin());
  } else {
    const float* p = t.data<float>();
    std::copy(p, p + n, out.begin());
  }
  return out;
}
}  // namespace

std::vector<double> DataParallel::gather_unit(int u, bool grads) {
  const UnitShard& s = plan().unit(u);
  if (s.padded == 0) return {};
  const auto [wb, we] = weights_range(u);
  const bool sharded = grads ? plan().shards_optimizer() : we - wb < s.padded;
  const Tensor local = grads ? owned_grad(u) : weights(u);
  if (!sharded) return to_doubles(local, s.numel);
  Tensor full = Tensor::empty(Shape{s.padded}, local.dtype(), alloc_, MemCategory::Other);
  groups_.of(u).all_gather(local.raw(), full.raw(), size_t(s.padded), local.dtype());
  return to_doubles(full, s.numel);
}

std::vector<double> DataParallel::gather_params() {
  std::vector<double> all;
  for (int u = 0; u < nu_; ++u) {
    const auto v = gather_unit(u, false);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

std::vector<double> DataParallel::gather_grads() {
  std::vector<double> all;
  for (int u = 0; u < nu_; ++u) {
    const auto v = gather_unit(u, true);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace meshtrain::parallel
