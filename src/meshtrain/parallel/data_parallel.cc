#include "meshtrain/parallel/data_parallel.h"

#include "meshtrain/kernels/kernel_table.h"

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
      tp_sums_(plan, groups, alloc),
      masters_(size_t(nu_)) {
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
  params_ = make_param_residency(sp, store, groups_, alloc_, stats_, seed);
  // Master weights: f32 copies of the owned range, initialized from the
  // same (seed, name, index) values the 16-bit parameters were rounded from.
  if (prec.has_master_copy())
    for (int u = 0; u < nu_; ++u) {
      masters_[size_t(u)] = Tensor::zeros(Shape{sp.owned_numel(u)}, prec.master, alloc_, MemCategory::Optimizer);
      init_owned_range(sp, u, seed, masters_[size_t(u)]);
    }
  grads_ = make_grad_reduction({sp, store, groups_, tp_sums_, reduce_op(), alloc_, stats_}, cfg_, plan.mesh().ep,
                               groups.cp, data_group_spans(cfg_));
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

DataParallel::~DataParallel() = default;

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
  tp_sums_.reset_stats();
  grads_->begin_window();
}

void DataParallel::finish_grads() {
  grads_->wait_all();
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
  params_->publish();
}

Tensor DataParallel::owned_compute_params(int u) {
  if (plan().owned_numel(u) == 0) return Tensor();
  return params_->owned(u);
}

void DataParallel::refresh_params() {
  if (model_.params().precision().has_master_copy())
    for (int u = 0; u < nu_; ++u) {
      const Tensor dst = owned_compute_params(u);
      if (dst.defined()) kernels::kernels_for(dst).convert(dst, masters_[size_t(u)]);
    }
  params_->publish();
}

// ---- state access ---------------------------------------------------------------

Tensor DataParallel::weights(int u) {
  if (masters_[size_t(u)].defined()) return masters_[size_t(u)];
  return params_->held(u);
}

std::pair<int64_t, int64_t> DataParallel::weights_range(int u) const {
  if (masters_[size_t(u)].defined()) return {plan().unit(u).owned_begin, plan().unit(u).owned_end};
  return params_->held_range(u);
}

Tensor DataParallel::owned_params(int u) {
  if (masters_[size_t(u)].defined()) return masters_[size_t(u)];
  return params_->owned(u);
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
