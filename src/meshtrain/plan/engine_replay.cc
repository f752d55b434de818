#include "meshtrain/plan/engine_replay.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

namespace {
constexpr MemCategory kComm = MemCategory::Comm;
int64_t size_of(DType t) { return int64_t(dtype_size(t)); }
}  // namespace

EngineReplay::EngineReplay(MemoryReplay& r, comm::CommLedger& ledger, const parallel::LayoutPlan& plan,
                           const parallel::ParallelConfig& cfg, const PrecisionPolicy& precision, int completion_lag)
    : r_(r),
      ledger_(ledger),
      plan_(plan),
      shards_(plan.shards()),
      cfg_(cfg),
      precision_(precision),
      lag_(completion_lag),
      dp_(plan.mesh().dp) {
  const int nu = shards_.num_units();
  gathered_.resize(size_t(nu));
  full_.resize(size_t(nu));
  staging_.resize(size_t(nu));
  reductions_.resize(size_t(nu));
  bucket_of_.assign(size_t(nu), -1);
  // data_parallel.cc constructor, in its order.
  for (int u = 0; u < nu; ++u) {
    if (shards_.shards_params())  // param_gather.cc: every unit's shard, even an empty one
      persistent_.push_back(r_.alloc(shards_.unit(u).shard, precision_.params, MemCategory::Params));
    else if (shards_.unit(u).padded > 0)
      persistent_.push_back(r_.alloc(shards_.unit(u).padded, precision_.params, MemCategory::Params));
  }
  if (precision_.has_master_copy())
    for (int u = 0; u < nu; ++u)
      persistent_.push_back(r_.alloc(shards_.owned_numel(u), precision_.master, MemCategory::Optimizer));
  if (!shards_.shards_grads())
    persistent_.push_back(r_.alloc(shards_.padded_total(), precision_.grad_accum, MemCategory::Grads));
  if (shards_.stage() == 0) {
    // grad_buckets.cc: the same bucket ranges.
    for (parallel::BucketRange& range : parallel::bucket_ranges(shards_, shards_.flat_offsets(), cfg_.bucket_mb,
                                                                 size_of(precision_.grad_accum), plan.mesh().ep > 1)) {
      for (int u : range.units) bucket_of_[size_t(u)] = int(buckets_.size());
      buckets_.push_back({std::move(range), 0, {}});
    }
  } else if (shards_.shards_grads()) {
    for (int u = 0; u < nu; ++u)  // sharded_grads.cc: the owned gradient shards
      persistent_.push_back(r_.alloc(shards_.unit(u).shard, precision_.grad_accum, MemCategory::Grads));
  }
  for (int u = 0; u < nu; ++u) {  // adamw.cc: m and v of the owned range
    persistent_.push_back(r_.alloc(shards_.owned_numel(u), precision_.optimizer, MemCategory::Optimizer));
    persistent_.push_back(r_.alloc(shards_.owned_numel(u), precision_.optimizer, MemCategory::Optimizer));
  }
  // tp_grad_sums.cc: a parameter summed over the whole tp group (its
  // reduce axes hold "tp") or over the tp ranks sharing its piece.
  tp_sums_.resize(size_t(nu));
  const int tp = plan_.mesh().tp;
  const auto& params = plan_.spec().params;
  for (size_t i = 0; tp > 1 && i < params.size(); ++i) {
    const parallel::ParamLayout& l = plan_.param(int(i));
    const bool over_tp = std::find(l.reduce_axes.begin(), l.reduce_axes.end(), "tp") != l.reduce_axes.end();
    if (!over_tp && l.tp_replicas == 1) continue;
    const int size = over_tp ? tp : l.tp_replicas;
    const std::string group = size == tp ? "tp" : "tp/share" + std::to_string(size);
    auto& sums = tp_sums_[size_t(params[i].unit)];
    auto it = std::find_if(sums.begin(), sums.end(), [&](const TpSum& s) { return s.group == group; });
    if (it == sums.end()) it = sums.insert(sums.end(), TpSum{group, size, 0});
    it->numel += params[i].numel();
  }
  open_leaf_.resize(size_t(nu));
  tree_.resize(size_t(nu));
  if (cfg_.reproducible)  // a previous window left every held unit's root
    for (int u = 0; u < nu; ++u)
      if (shards_.unit(u).padded > 0)
        tree_[size_t(u)].push_back({0, r_.alloc(shards_.unit(u).padded, precision_.grad_accum, MemCategory::Grads)});
}

void EngineReplay::begin_window() {
  for (auto& t : tree_) t.clear();
  for (auto& l : open_leaf_) l = SymTensor();
}

// grad_tree.cc: each micro-batch's gradient in its own leaf, equal levels
// summed as they close.
void EngineReplay::close_leaf(int u) {
  auto& stack = tree_[size_t(u)];
  stack.push_back({0, std::move(open_leaf_[size_t(u)])});
  open_leaf_[size_t(u)] = SymTensor();
  while (stack.size() >= 2 && stack[stack.size() - 1].level == stack[stack.size() - 2].level) {
    stack.pop_back();
    stack.back().level += 1;
  }
}

void EngineReplay::sum_over_tp(int u) {
  for (const TpSum& s : tp_sums_[size_t(u)]) {
    const SymTensor packed = r_.alloc(s.numel, precision_.grad_accum, kComm);
    add(s.group, s.size, comm::OpKind::AllReduce, s.numel * size_of(precision_.grad_accum), comm::StepPhase::GradSync,
        "unit " + std::to_string(u) + " gradients partial over tp ranks");
  }
}

// tree_reduce.cc over dp, blocking, point-to-point only.
void EngineReplay::reduce_tree(int u) {
  sum_over_tp(u);  // on the window's root, before the data-parallel tree
  const int64_t n = shards_.unit(u).padded;
  const int64_t esize = size_of(precision_.grad_accum);
  const auto [group, R] = group_of(u);
  if (R == 1 || n == 0) return;
  if (shards_.stage() == 0) {
    SymTensor theirs = r_.alloc(n, precision_.grad_accum, kComm);
    for (int level = 1; level < R; level <<= 1) {
      add(group, R, comm::OpKind::Recv, n * esize, comm::StepPhase::GradSync, "tree all-reduce level");
      add(group, R, comm::OpKind::Send, n * esize, comm::StepPhase::GradSync, "tree all-reduce level");
    }
    return;
  }
  int64_t chunks = R;  // chunks still summed here; halved each level
  const int64_t chunk = n / R;
  for (int level = 1; level < R; level <<= 1) {
    const int64_t half = chunks / 2;
    SymTensor out = r_.alloc(half * chunk, precision_.grad_accum, kComm);
    SymTensor in = r_.alloc(half * chunk, precision_.grad_accum, kComm);
    add(group, R, comm::OpKind::Recv, half * chunk * esize, comm::StepPhase::GradSync, "tree reduce-scatter level");
    add(group, R, comm::OpKind::Send, half * chunk * esize, comm::StepPhase::GradSync, "tree reduce-scatter level");
    chunks = half;
  }
}

// unit_groups.h: routed experts' units reduce over edp under ep > 1.
std::pair<std::string, int> EngineReplay::group_of(int u) const {
  const parallel::UnitShard& s = shards_.unit(u);
  return s.experts && plan_.mesh().ep > 1 ? std::pair<std::string, int>{"edp", s.group_size}
                                          : std::pair<std::string, int>{"dp", dp_};
}

void EngineReplay::add(const std::string& group, int size, comm::OpKind kind, int64_t bytes, comm::StepPhase phase,
                       std::string what) {
  ledger_.add({group, size, kind, bytes, phase, std::move(what)});
}

// param_gather.cc
void EngineReplay::gather(int u) {
  if (!shards_.shards_params() || u < 0 || u >= shards_.num_units()) return;
  if (gathered_[size_t(u)].defined() || shards_.unit(u).padded == 0) return;
  gathered_[size_t(u)] = r_.alloc(shards_.unit(u).padded, precision_.params, MemCategory::Gathered);
  const auto [group, size] = group_of(u);
  add(group, size, comm::OpKind::AllGather, shards_.unit(u).padded * size_of(precision_.params),
      gather_phase_, "unit " + std::to_string(u) + " parameters (ZeRO-3 gather)");
}

void EngineReplay::require(int u) { gather(u); }

void EngineReplay::release(int u) {
  if (shards_.shards_params()) gathered_[size_t(u)] = SymTensor();
}

// sharded_grads.cc reap(): reductions that have finished free their buffers.
void EngineReplay::reap() {
  for (int u = 0; u < shards_.num_units(); ++u) {
    Reduction& red = reductions_[size_t(u)];
    if (red.in_flight && backward_actions_ - red.launched_at >= lag_) {
      red.in_flight = false;
      complete(u);
    }
  }
}

void EngineReplay::complete(int u) {
  staging_[size_t(u)] = SymTensor();
  if (shards_.shards_grads()) full_[size_t(u)] = SymTensor();
}

void EngineReplay::prepare_grads(int u) {
  if (cfg_.reproducible) {
    if (!open_leaf_[size_t(u)].defined())
      open_leaf_[size_t(u)] = r_.alloc(shards_.unit(u).padded, precision_.grad_accum, MemCategory::Grads);
    return;
  }
  if (!shards_.shards_grads()) return;
  reap();
  if (full_[size_t(u)].defined()) return;
  if (reductions_[size_t(u)].in_flight) {
    reductions_[size_t(u)].in_flight = false;
    complete(u);
  }
  full_[size_t(u)] = r_.alloc(shards_.unit(u).padded, precision_.grad_accum, kComm);
}

void EngineReplay::reduce_grads(int u) {
  if (cfg_.reproducible) return reduce_tree(u);
  if (!tp_sums_[size_t(u)].empty()) {
    prepare_grads(u);  // bound (ZeRO-2/3: a unit no backward touched still sums its zeros)
    sum_over_tp(u);
  }
  const parallel::UnitShard& s = shards_.unit(u);
  if (shards_.stage() == 0) {
    // grad_buckets.cc unit_ready: the bucket goes when its last unit is in.
    MT_CHECK(bucket_of_[size_t(u)] >= 0, "unit ", u, " has no gradient bucket on this rank");
    Bucket& b = buckets_[size_t(bucket_of_[size_t(u)])];
    if (++b.ready < int(b.range.units.size())) return;
    DType dt = precision_.grad_accum;
    if (precision_.grad_reduce != dt) {
      b.staging = r_.alloc(b.range.end - b.range.begin, precision_.grad_reduce, kComm);
      dt = precision_.grad_reduce;
    }
    const auto [group, size] = group_of(b.range.units.front());
    add(group, size, comm::OpKind::AllReduce, (b.range.end - b.range.begin) * size_of(dt), comm::StepPhase::GradSync,
        "bucket of units " + std::to_string(b.range.units.back()) + "-" + std::to_string(b.range.units.front()));
    return;
  }
  const DType dt = precision_.grad_reduce;
  if (dt != precision_.grad_accum) {
    if (shards_.shards_grads()) prepare_grads(u);
    staging_[size_t(u)] = r_.alloc(s.padded, dt, kComm);
  } else if (shards_.shards_grads()) {
    prepare_grads(u);
  }
  reductions_[size_t(u)] = {true, backward_actions_};
  const auto [group, size] = group_of(u);
  add(group, size, comm::OpKind::ReduceScatter, s.padded * size_of(dt), comm::StepPhase::GradSync,
      "unit " + std::to_string(u) + " gradient reduce-scatter");
}

void EngineReplay::finish_grads() {
  for (Bucket& b : buckets_) b.staging = SymTensor();
  for (int u = 0; u < shards_.num_units(); ++u) {
    if (reductions_[size_t(u)].in_flight) {
      reductions_[size_t(u)].in_flight = false;
      complete(u);
    }
    if (shards_.shards_grads()) full_[size_t(u)] = SymTensor();
  }
}

int64_t norm_blocks(const parallel::ShardPlan& shards, int dp) {
  const int64_t replicas = shards.shards_optimizer() && dp > 1 ? dp : 1;
  int64_t blocks = 0;
  for (int u = 0; u < shards.num_units(); ++u) blocks += shards.owned_numel(u) / parallel::kNormBlock * replicas;
  return blocks;
}

// grad_norm.cc: block sums gathered over dp in canonical order (sharded
// state only), then every model-parallel rank's block counts per unit and
// its blocks, padded to the longest list.
void EngineReplay::grad_norm(int64_t longest_model_list) {
  if (shards_.shards_optimizer() && dp_ > 1)
    add("dp", dp_, comm::OpKind::AllGather, norm_blocks(shards_, dp_) * 8, comm::StepPhase::Optimizer,
        "gradient norm block sums");
  const int64_t model = plan_.mesh().pp * plan_.mesh().tp;
  if (model > 1) {
    add("pp+tp", int(model), comm::OpKind::AllGather, model * shards_.num_units() * 8, comm::StepPhase::Optimizer,
        "gradient norm block counts per unit of the model-parallel ranks");
    add("pp+tp", int(model), comm::OpKind::AllGather, model * longest_model_list * 8, comm::StepPhase::Optimizer,
        "gradient norm blocks of the model-parallel ranks");
  }
}

// data_parallel.cc publish_params: updated shards all-gathered (stages 1, 2).
void EngineReplay::publish() {
  if (shards_.stage() != 1 && shards_.stage() != 2) return;
  for (int u = 0; u < shards_.num_units(); ++u)
    if (shards_.unit(u).padded > 0) {
      const auto [group, size] = group_of(u);
      add(group, size, comm::OpKind::AllGather, shards_.unit(u).padded * size_of(precision_.params),
          comm::StepPhase::Publish, "unit " + std::to_string(u) + " updated parameters");
    }
}

}  // namespace meshtrain::plan
