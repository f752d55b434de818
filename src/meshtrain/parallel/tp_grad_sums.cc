#include "meshtrain/parallel/tp_grad_sums.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

TpGradSums::TpGradSums(const LayoutPlan& plan, const RankGroups& groups, std::shared_ptr<CachingAllocator> alloc)
    : spec_(plan.spec()),
      alloc_(std::move(alloc)),
      group_of_(plan.spec().params.size(), nullptr),
      by_unit_(plan.spec().units.size()) {
  comm::ProcessGroup* tp = groups.tp;
  if (!tp) return;
  const auto& params = plan.spec().params;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamLayout& l = plan.param(int(i));
    comm::ProcessGroup* g =
        l.reduce_axes.has(comm::Axis::Tp) ? tp : (l.share_sums ? groups.kv_share : nullptr);
    if (!g) continue;
    group_of_[i] = g;
    auto& sums = by_unit_[size_t(params[i].unit)];
    auto it = std::find_if(sums.begin(), sums.end(), [&](const Sum& s) { return s.group == g; });
    if (it == sums.end()) it = sums.insert(sums.end(), Sum{g, {}});
    it->params.push_back(int(i));
  }
}

bool TpGradSums::any(int u) const { return !by_unit_[size_t(u)].empty(); }

comm::ProcessGroup* TpGradSums::group_of(int param) const { return group_of_[size_t(param)]; }

void TpGradSums::reduce(int u, const Tensor& unit_grad) {
  auto grad_of = [&](int p) {
    const model::ParamSpec& ps = spec_.params[size_t(p)];
    return unit_grad.flat_slice(ps.unit_offset, ps.unit_offset + ps.numel());
  };
  const kernels::KernelTable& k = kernels::kernels_for(unit_grad);
  for (const Sum& s : by_unit_[size_t(u)]) {
    int64_t total = 0;
    for (int p : s.params) total += spec_.params[size_t(p)].numel();
    Tensor packed = Tensor::empty(Shape{total}, unit_grad.dtype(), alloc_, MemCategory::Comm);
    int64_t off = 0;
    for (int p : s.params) {
      const Tensor g = grad_of(p);
      k.copy(packed.flat_slice(off, off + g.numel()), g);
      off += g.numel();
    }
    const auto t0 = std::chrono::steady_clock::now();
    s.group->all_reduce(packed);
    stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_.calls += 1;
    stats_.bytes += int64_t(packed.nbytes());
    off = 0;
    for (int p : s.params) {
      const Tensor g = grad_of(p);
      k.copy(g, packed.flat_slice(off, off + g.numel()));
      off += g.numel();
    }
  }
}

}  // namespace meshtrain::parallel
