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

// The canonical sum over the units with experts == `experts`, whose
// gradients are summed over `data` and held differently across `model`.
double sum_squares_of(const LayoutPlan& plan, const std::function<Tensor(int)>& owned_grad, bool experts,
                      comm::ProcessGroup& data, comm::ProcessGroup& model) {
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
    for (int64_t b = ob, i = 0; b < shards.unit(u).owned_end; b += kNormBlock, ++i)
      local.push_back(block_sum(plan, k, u, g, ob, b, b + kNormBlock, whole[size_t(i)]));
  }
  // This rank's units' blocks in canonical order: unit by unit, blocks in
  // global order (rank-major inside a unit over dp), identical to the
  // unsharded list. blocks_of[u]: how many belong to unit u.
  std::vector<double> ordered;
  std::vector<int64_t> blocks_of(size_t(U), 0);
  if (!shards.shards_optimizer() || data.size() == 1) {
    ordered = local;
    for (int u = 0; u < U; ++u) blocks_of[size_t(u)] = owned_numel(u) / kNormBlock;
  } else {
    const size_t per_rank = local.size(), R = size_t(data.size());
    std::vector<double> all(per_rank * R);
    data.all_gather(local.data(), all.data(), all.size(), DType::F64);
    for (int u = 0; u < U; ++u) {
      const int64_t nb = owned_numel(u) / kNormBlock;
      blocks_of[size_t(u)] = nb * int64_t(R);
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
  std::vector<int64_t> all_counts(M * size_t(U));
  model.all_gather(blocks_of.data(), all_counts.data(), all_counts.size(), DType::I64);
  int64_t longest = 0;
  std::vector<int64_t> begin(M * size_t(U));  // offset of (rank, unit) in that rank's list
  for (size_t r = 0; r < M; ++r) {
    int64_t off = 0;
    for (size_t u = 0; u < size_t(U); ++u) begin[r * size_t(U) + u] = off, off += all_counts[r * size_t(U) + u];
    longest = std::max(longest, off);
  }
  ordered.resize(size_t(longest), 0.0);
  std::vector<double> blocks(M * size_t(longest));
  model.all_gather(ordered.data(), blocks.data(), blocks.size(), DType::F64);
  double total = 0;
  for (size_t u = 0; u < size_t(U); ++u)
    for (size_t r = 0; r < M; ++r) {
      const double* p = blocks.data() + r * size_t(longest) + size_t(begin[r * size_t(U) + u]);
      for (int64_t b = 0; b < all_counts[r * size_t(U) + u]; ++b) total += p[b];
    }
  return total;
}

}  // namespace

double global_grad_sum_squares(const LayoutPlan& plan, const std::function<Tensor(int)>& owned_grad,
                               const UnitGroups& groups, comm::ProcessGroup& model,
                               comm::ProcessGroup& expert_model) {
  const double dense = sum_squares_of(plan, owned_grad, false, groups.data(), model);
  // Every rank takes part (with or without experts of its own) in the same order.
  const bool any_experts = plan.model_config().n_experts > 0;
  return any_experts ? dense + sum_squares_of(plan, owned_grad, true, groups.experts(), expert_model) : dense;
}

}  // namespace meshtrain::parallel
