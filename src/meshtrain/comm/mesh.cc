#include "meshtrain/comm/mesh.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

int MeshShape::size(Axis a) const {
  switch (a) {
    case Axis::Pp: return pp;
    case Axis::Dp: return dp;
    case Axis::Cp: return cp;
    case Axis::Tp: return tp;
    case Axis::Ep: return ep;
    case Axis::Edp: return dp * cp / ep;
  }
  return 1;
}

int MeshShape::size(Axes axes) const {
  int n = 1;
  for (int i = 0; i < kNumAxes; ++i)
    if (axes.has(Axis(i))) n *= size(Axis(i));
  return n;
}

std::string MeshShape::str() const {
  return detail::concat("pp=", pp, " dp=", dp, " cp=", cp, " tp=", tp, ep > 1 ? detail::concat(" (ep=", ep, ")") : "");
}

void MeshShape::validate(int world) const {
  MT_REQUIRE(ConfigError, pp >= 1 && dp >= 1 && cp >= 1 && tp >= 1 && ep >= 1, "mesh axis sizes must be >= 1: ",
             str());
  MT_REQUIRE(ConfigError, world_size() == world, "mesh ", str(), ": pp*dp*cp*tp = ", pp, "*", dp, "*", cp, "*", tp,
             " = ", world_size(), " but the world has ", world, " ranks");
  MT_REQUIRE(ConfigError, (dp * cp) % ep == 0, "mesh ", str(), ": the expert axis is carved out of dp*cp = ", dp * cp,
             ", so ep = ", ep, " must divide it (ep is never multiplied into the device count)");
}

MeshCoords MeshShape::coords(int rank) const {
  MeshCoords c;
  c[Axis::Tp] = rank % tp;
  c[Axis::Cp] = (rank / tp) % cp;
  c[Axis::Dp] = (rank / (tp * cp)) % dp;
  c[Axis::Pp] = rank / (tp * cp * dp);
  const int i = c[Axis::Dp] * cp + c[Axis::Cp];
  c[Axis::Ep] = i % ep;
  c[Axis::Edp] = i / ep;
  return c;
}

int MeshShape::rank_of(const MeshCoords& c) const {
  return ((c[Axis::Pp] * dp + c[Axis::Dp]) * cp + c[Axis::Cp]) * tp + c[Axis::Tp];
}

std::vector<int> MeshShape::members(int rank, Axes axes) const {
  const bool experts = axes.has(Axis::Ep) || axes.has(Axis::Edp);
  MT_CHECK(!experts || (!axes.has(Axis::Dp) && !axes.has(Axis::Cp)), "a group over ", axes.key(),
           " mixes the expert axes with dp or cp");
  const std::array<Axis, 4> system = experts ? std::array<Axis, 4>{Axis::Pp, Axis::Edp, Axis::Ep, Axis::Tp}
                                             : kWorldAxes;
  const MeshCoords me = coords(rank);
  std::vector<int> out;
  for (int r = 0; r < world_size(); ++r) {
    const MeshCoords c = coords(r);
    if (std::all_of(system.begin(), system.end(), [&](Axis a) { return axes.has(a) || c[a] == me[a]; }))
      out.push_back(r);
  }
  return out;
}

const std::vector<Axes>& Mesh::group_axes() {
  static const std::vector<Axes> sets = [] {
    std::vector<Axes> s;
    for (int mask = 1; mask < 16; ++mask) {
      Axes a;
      for (int i = 0; i < 4; ++i)
        if (mask & (1 << i)) a = a | kWorldAxes[size_t(i)];
      s.push_back(a);
    }
    s.push_back(Axis::Ep);
    s.push_back(Axis::Edp);
    s.push_back(Axes{Axis::Pp, Axis::Tp, Axis::Ep});
    return s;
  }();
  return sets;
}

Mesh Mesh::create(const MeshShape& shape, const std::shared_ptr<ProcessGroup>& world) {
  shape.validate(world->size());
  Mesh m;
  m.shape_ = shape;
  m.rank_ = world->rank();
  m.coords_ = shape.coords(m.rank_);
  m.world_ = world;
  // In the same order on every rank: a group is colored by its first
  // member and ordered by world rank.
  for (Axes axes : group_axes()) {
    const std::vector<int> members = shape.members(m.rank_, axes);
    const int position = int(std::find(members.begin(), members.end(), m.rank_) - members.begin());
    m.groups_[axes] = world->split(members.front(), position, SplitPlace{int(members.size()), position}, axes.key());
  }
  return m;
}

std::shared_ptr<ProcessGroup> Mesh::group_ptr(Axes axes) const {
  auto it = groups_.find(axes);
  MT_REQUIRE(ConfigError, it != groups_.end(), "mesh has no group '", axes.key(),
             "' (axes pp, dp, cp, tp in any combination, ep / edp alone, or pp+tp+ep)");
  return it->second;
}

ProcessGroup& Mesh::group(std::initializer_list<std::string_view> names) const {
  Axes axes;
  for (std::string_view n : names) axes = axes | Axes::parse(n);
  return group(axes);
}

}  // namespace meshtrain::comm
