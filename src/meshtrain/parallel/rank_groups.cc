#include "meshtrain/parallel/rank_groups.h"

#include <algorithm>
#include <set>

namespace meshtrain::parallel {

namespace {

using comm::Axis;

comm::ProcessGroup* if_many(comm::ProcessGroup& g) { return g.size() > 1 ? &g : nullptr; }

// The group of the tie stages in their order (the first stage is rank 0, so
// the threads backend sums embedding + head), null for the other pipeline
// ranks and when no weight is tied across stages.
std::shared_ptr<comm::ProcessGroup> tie_group(comm::ProcessGroup* pp, const std::vector<int>& stages) {
  if (!pp || stages.empty()) return nullptr;
  const auto at = std::find(stages.begin(), stages.end(), pp->rank());
  const bool member = at != stages.end();
  const int position = member ? int(at - stages.begin()) : 0;
  return pp->split(member ? 0 : -1, position, comm::SplitPlace{int(stages.size()), position}, pp->name() + ".tie");
}

}  // namespace

RankGroups resolve_groups(const LayoutPlan& plan, const comm::Mesh& mesh, const DataGroupForm& form) {
  RankGroups g;
  // One form per axis set (dp and data are one group without cp).
  std::map<comm::Axes, comm::ProcessGroup*> formed;
  auto data_parallel = [&](comm::Axes axes) -> comm::ProcessGroup* {
    if (!form) return &mesh.group(axes);
    auto it = formed.find(axes);
    if (it != formed.end()) return it->second;
    std::shared_ptr<comm::ProcessGroup> group = form(mesh.group_ptr(axes), mesh.shape().members(mesh.rank(), axes));
    if (group != mesh.group_ptr(axes)) g.owned.push_back(group);
    return formed[axes] = group.get();
  };
  g.world = &mesh.world();
  g.dp = data_parallel(Axis::Dp);
  g.data = data_parallel(plan.data_axes());
  g.model = &mesh.group(plan.model_axes());
  g.tp = if_many(mesh.group(Axis::Tp));
  g.pp = if_many(mesh.group(Axis::Pp));
  g.cp = if_many(mesh.group(Axis::Cp));
  g.ep = if_many(mesh.group(Axis::Ep));
  g.edp = g.ep ? data_parallel(Axis::Edp) : g.data;
  g.expert_model = g.ep ? &mesh.group(comm::Axes{Axis::Pp, Axis::Tp, Axis::Ep}) : g.model;
  g.tie = tie_group(g.pp, plan.tie_stages());
  if (g.tie) g.owned.push_back(g.tie);
  if (g.tp) {
    std::set<int> shares;
    for (int i = 0; i < int(plan.spec().params.size()); ++i)
      if (plan.param(i).tp_replicas > 1) shares.insert(plan.param(i).tp_replicas);
    MT_CHECK(shares.size() <= 1, "pieces shared by ", shares.size(), " different numbers of tp ranks");
    const int t = g.tp->size(), r = g.tp->rank();
    if (!shares.empty()) {
      const int n = *shares.begin();
      if (n == t) {
        g.kv_share = g.tp;
      } else {
        g.owned.push_back(
            g.tp->split(r / n, r, comm::SplitPlace{n, r % n}, g.tp->name() + "/share" + std::to_string(n)));
        g.kv_share = g.owned.back().get();
      }
    }
  }
  return g;
}

}  // namespace meshtrain::parallel
