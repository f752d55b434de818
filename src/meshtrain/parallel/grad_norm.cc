#include "meshtrain/parallel/grad_norm.h"

#include <algorithm>

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

namespace {

// Sum of squares of block [b, e) of unit u's owned gradient `g` (flat
// offsets within the unit), skipping parameters this copy does not count;
// `whole` is the block's sum over every element.
double block_sum(const LayoutPlan& plan, const kernels::KernelTable& k, int u, const Tensor& g, int64_t owned_begin,
                 int64_t b, int64_t e, double whole) {
  const auto pieces = plan.shards().pieces_in(u, b, e);
  const bool all_counted = std::all_of(pieces.begin(), pieces.end(),
                                       [&](const OwnedPiece& p) { return plan.param(p.param).counts_in_norm; });
  if (all_counted) return whole;
  double s = 0;
  for (const OwnedPiece& p : pieces)
    if (plan.param(p.param).counts_in_norm) {
      const int64_t off = p.unit_offset - owned_begin;
      s += k.sum_squares(g.flat_slice(off, off + (p.param_end - p.param_begin)));
    }
  return s;
}

// Norm blocks per unit of this rank's kind of units, as its list holds them
// after the gather over the data group.
std::vector<int64_t> block_counts(const ShardPlan& shards, bool experts, int data_size) {
  const bool gathered = shards.shards_optimizer() && data_size > 1;
  std::vector<int64_t> out;
  for (int u = 0; u < shards.num_units(); ++u) {
    const int64_t owned = shards.unit(u).experts == experts ? shards.owned_numel(u) : 0;
    out.push_back(owned / kNormBlock * (gathered ? data_size : 1));
  }
  return out;
}

}  // namespace

GradNorm::GradNorm(const LayoutPlan& plan, const UnitGroups& groups, comm::ProcessGroup& model,
                   comm::ProcessGroup& expert_model, std::shared_ptr<CachingAllocator> alloc)
    : plan_(plan), alloc_(std::move(alloc)) {
  for (const model::ParamUnit& unit : plan.spec().units)
    counted_.push_back(std::all_of(unit.params.begin(), unit.params.end(),
                                   [&](int i) { return plan.param(i).counts_in_norm; }));
  dense_ = {false, &groups.data(), &model, {}};
  experts_ = {true, &groups.experts(), &expert_model, {}};
  for (Kind* k : {&dense_, &experts_}) {
    if (k->experts && plan.model_config().n_experts == 0) continue;
    if (k->model->size() == 1) continue;
    const comm::Axes axes = k->experts ? plan.model_axes() | comm::Axis::Ep : plan.model_axes();
    const std::vector<int> members = plan.mesh().members(plan.rank(), axes);
    MT_CHECK(int(members.size()) == k->model->size(), "the model group has ", k->model->size(), " ranks, the layout ",
             members.size());
    for (int r : members) {
      const std::vector<int64_t> c =
          r == plan.rank() ? block_counts(plan.shards(), k->experts, k->data->size())
                           : block_counts(LayoutPlan(plan.model_config(), plan.mesh(), r, plan.options(), plan.global_spec()).shards(),
                                          k->experts, k->data->size());
      k->counts.insert(k->counts.end(), c.begin(), c.end());
    }
  }
}

// The canonical sum over the units of one kind (dense or experts), whose
// gradients are summed over kind.data and held differently across kind.model.
double GradNorm::sum_squares_of(const Kind& kind, const std::function<Tensor(int)>& owned_grad) const {
  const LayoutPlan& plan = plan_;
  const bool experts = kind.experts;
  comm::ProcessGroup& data = *kind.data;
  comm::ProcessGroup& model = *kind.model;
  const ShardPlan& shards = plan.shards();
  const int U = shards.num_units();
  // Blocks of the units of the other kind count as none.
  auto owned_numel = [&](int u) { return shards.unit(u).experts == experts ? shards.owned_numel(u) : 0; };
  std::vector<double> local;
  std::vector<int64_t> unit_block0;  // first block of unit u within a rank's list
  for (int u = 0; u < U; ++u) {
    unit_block0.push_back(int64_t(local.size()));
    if (owned_numel(u) == 0) continue;
    const Tensor g = owned_grad(u);
    const kernels::KernelTable& k = kernels::kernels_for(g);
    const int64_t ob = shards.unit(u).owned_begin;
    // Every block's sum at once (in parallel), then the blocks holding
    // parameters the norm skips are summed again piece by piece.
    std::vector<double> whole(size_t((owned_numel(u) + kNormBlock - 1) / kNormBlock));
    k.block_sum_squares(g.flat_slice(0, owned_numel(u)), kNormBlock, whole.data());
    if (counted_[size_t(u)]) {  // every parameter of the unit counts: the blocks' sums as they are
      local.insert(local.end(), whole.begin(), whole.end());
      continue;
    }
    for (int64_t b = ob, i = 0; b < shards.unit(u).owned_end; b += kNormBlock, ++i)
      local.push_back(block_sum(plan, k, u, g, ob, b, b + kNormBlock, whole[size_t(i)]));
  }
  // This rank's units' blocks in canonical order: unit by unit, blocks in
  // global order (rank-major inside a unit over dp), identical to the
  // unsharded list.
  std::vector<double> ordered;
  if (!shards.shards_optimizer() || data.size() == 1) {
    ordered = local;
  } else {
    const size_t per_rank = local.size(), R = size_t(data.size());
    std::vector<double> all(per_rank * R);
    data.all_gather(local.data(), all.data(), all.size(), DType::F64);
    for (int u = 0; u < U; ++u) {
      const int64_t nb = owned_numel(u) / kNormBlock;
      for (size_t r = 0; r < R; ++r)
        for (int64_t b = 0; b < nb; ++b) ordered.push_back(all[r * per_rank + size_t(unit_block0[size_t(u)] + b)]);
    }
  }
  if (model.size() == 1) {
    double total = 0;
    for (double v : ordered) total += v;
    return total;
  }
  // Model-parallel ranks hold different units (pipeline stages) or pieces
  // (tensor-parallel ranks): gather every rank's blocks and sum unit by
  // unit, ranks in order within a unit, so a pipeline split sums exactly
  // as one rank holding every unit does.
  const size_t M = size_t(model.size());
  const std::vector<int64_t>& all_counts = kind.counts;
  int64_t longest = 0;
  std::vector<int64_t> begin(M * size_t(U));  // offset of (rank, unit) in that rank's list
  for (size_t r = 0; r < M; ++r) {
    int64_t off = 0;
    for (size_t u = 0; u < size_t(U); ++u) begin[r * size_t(U) + u] = off, off += all_counts[r * size_t(U) + u];
    longest = std::max(longest, off);
  }
  MT_CHECK(int64_t(ordered.size()) <= longest, "norm blocks: ", ordered.size(), " held, the layout says at most ",
           longest);
  // On the device (a step's workspace): the gather grows with the model ranks.
  const kernels::KernelTable& k = kernels::kernels_for(alloc_->device());
  const int64_t held = int64_t(ordered.size());
  const Tensor mine = Tensor::empty(Shape{longest}, DType::F64, alloc_, MemCategory::Workspace);
  const Tensor blocks = Tensor::empty(Shape{int64_t(M) * longest}, DType::F64, alloc_, MemCategory::Workspace);
  k.copy(mine.flat_slice(0, held), Tensor::wrap(ordered.data(), Shape{held}, DType::F64));
  k.fill(mine.flat_slice(held, longest), 0.0);
  model.all_gather(mine, blocks);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t u = 0; u < size_t(U); ++u)
    for (size_t r = 0; r < M; ++r)
      ranges.emplace_back(int64_t(r) * longest + begin[r * size_t(U) + u], all_counts[r * size_t(U) + u]);
  return k.sum_in_order(blocks, ranges);
}

double GradNorm::sum_squares(const std::function<Tensor(int)>& owned_grad) const {
  const double dense = sum_squares_of(dense_, owned_grad);
  // Every rank takes part (with or without experts of its own) in the same order.
  const bool any_experts = plan_.model_config().n_experts > 0;
  return any_experts ? dense + sum_squares_of(experts_, owned_grad) : dense;
}

}  // namespace meshtrain::parallel
