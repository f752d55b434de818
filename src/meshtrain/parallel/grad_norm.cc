#include "meshtrain/parallel/grad_norm.h"

#include <algorithm>

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

namespace {

// Sum of squares of block [b, e) of unit u's owned gradient `g` (flat
// offsets within the unit), skipping parameters this copy does not count.
double block_sum(const LayoutPlan& plan, const kernels::KernelTable& k, int u, const Tensor& g, int64_t owned_begin,
                 int64_t b, int64_t e) {
  const auto pieces = plan.shards().pieces_in(u, b, e);
  const bool all_counted = std::all_of(pieces.begin(), pieces.end(),
                                       [&](const OwnedPiece& p) { return plan.param(p.param).counts_in_norm; });
  if (all_counted) return k.sum_squares(g.flat_slice(b - owned_begin, e - owned_begin));
  double s = 0;
  for (const OwnedPiece& p : pieces)
    if (plan.param(p.param).counts_in_norm) {
      const int64_t off = p.unit_offset - owned_begin;
      s += k.sum_squares(g.flat_slice(off, off + (p.param_end - p.param_begin)));
    }
  return s;
}

}  // namespace

double global_grad_sum_squares(const LayoutPlan& plan, const std::function<Tensor(int)>& owned_grad,
                               comm::ProcessGroup& data, comm::ProcessGroup& model) {
  const ShardPlan& shards = plan.shards();
  std::vector<double> local;
  std::vector<int64_t> unit_block0;  // first block of unit u within a rank's list
  for (int u = 0; u < shards.num_units(); ++u) {
    unit_block0.push_back(int64_t(local.size()));
    if (shards.owned_numel(u) == 0) continue;
    const Tensor g = owned_grad(u);
    const kernels::KernelTable& k = kernels::kernels_for(g);
    const int64_t ob = shards.unit(u).owned_begin;
    for (int64_t b = ob; b < shards.unit(u).owned_end; b += kNormBlock)
      local.push_back(block_sum(plan, k, u, g, ob, b, b + kNormBlock));
  }
  double total = 0;
  if (!shards.shards_optimizer() || data.size() == 1) {
    for (double v : local) total += v;
  } else {
    // Canonical order: unit by unit, blocks in global order (rank-major
    // inside a unit), identical to the unsharded sum.
    const size_t per_rank = local.size(), R = size_t(data.size());
    std::vector<double> all(per_rank * R);
    data.all_gather(local.data(), all.data(), all.size(), DType::F64);
    for (int u = 0; u < shards.num_units(); ++u) {
      const int64_t nb = shards.owned_numel(u) / kNormBlock;
      for (size_t r = 0; r < R; ++r)
        for (int64_t b = 0; b < nb; ++b) total += all[r * per_rank + size_t(unit_block0[size_t(u)] + b)];
    }
  }
  if (model.size() == 1) return total;
  std::vector<double> totals(size_t(model.size()));
  model.all_gather(&total, totals.data(), totals.size(), DType::F64);
  double sum = 0;
  for (double t : totals) sum += t;
  return sum;
}

}  // namespace meshtrain::parallel
