#include "meshtrain/comm/mesh.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

const std::vector<std::string>& MeshShape::axis_names() {
  static const std::vector<std::string> names{"pp", "dp", "cp", "tp"};
  return names;
}

int MeshShape::size(const std::string& axis) const {
  if (axis == "pp") return pp;
  if (axis == "dp") return dp;
  if (axis == "cp") return cp;
  if (axis == "tp") return tp;
  if (axis == "ep") return ep;
  if (axis == "edp") return dp * cp / ep;
  MT_THROW(ConfigError, "unknown mesh axis '", axis, "' (axes: pp, dp, cp, tp, ep, edp)");
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

std::map<std::string, int> MeshShape::coords(int rank) const {
  std::map<std::string, int> c;
  c["tp"] = rank % tp;
  c["cp"] = (rank / tp) % cp;
  c["dp"] = (rank / (tp * cp)) % dp;
  c["pp"] = rank / (tp * cp * dp);
  const int i = c["dp"] * cp + c["cp"];
  c["ep"] = i % ep;
  c["edp"] = i / ep;
  return c;
}

int MeshShape::rank_of(const std::map<std::string, int>& c) const {
  return ((c.at("pp") * dp + c.at("dp")) * cp + c.at("cp")) * tp + c.at("tp");
}

std::string Mesh::key(std::vector<std::string> axes) {
  // Canonical order pp, dp, cp, tp (then ep/edp as given).
  const auto& order = MeshShape::axis_names();
  auto pos = [&](const std::string& a) {
    auto it = std::find(order.begin(), order.end(), a);
    return it == order.end() ? int(order.size()) : int(it - order.begin());
  };
  std::stable_sort(axes.begin(), axes.end(), [&](auto& a, auto& b) { return pos(a) < pos(b); });
  std::string k;
  for (auto& a : axes) k += (k.empty() ? "" : "+") + a;
  return k;
}

Mesh Mesh::create(const MeshShape& shape, const std::shared_ptr<ProcessGroup>& world) {
  shape.validate(world->size());
  Mesh m;
  m.shape_ = shape;
  m.rank_ = world->rank();
  m.coords_ = shape.coords(m.rank_);
  m.world_ = world;
  const auto& axes = MeshShape::axis_names();
  // Every non-empty subset of axes, in the same order on every rank: the
  // group of a subset holds ranks agreeing on all other coordinates.
  for (int mask = 1; mask < 16; ++mask) {
    int color = 0, key = 0;
    std::vector<std::string> names;
    for (int a = 0; a < 4; ++a) {
      const int sz = shape.size(axes[size_t(a)]), c = m.coords_[axes[size_t(a)]];
      if (mask & (1 << a)) {
        key = key * sz + c;
        names.push_back(axes[size_t(a)]);
      } else {
        color = color * sz + c;
      }
    }
    const std::string k = Mesh::key(names);
    m.groups_[k] = world->split(color, key, k);
  }
  // Expert axes inside dp x cp (S9): same pp and tp coordinate.
  const int outer = m.coords_["pp"] * shape.tp + m.coords_["tp"];
  const int ep = shape.ep, edp = shape.dp * shape.cp / shape.ep;
  m.groups_["ep"] = world->split(outer * edp + m.coords_["edp"], m.coords_["ep"], "ep");
  m.groups_["edp"] = world->split(outer * ep + m.coords_["ep"], m.coords_["edp"], "edp");
  // Every holder of some routed expert for one edp coordinate: the model
  // axes times ep (global views and norms of the experts span it).
  const std::string holders = Mesh::key({"pp", "tp", "ep"});
  m.groups_[holders] =
      world->split(m.coords_["edp"], (m.coords_["pp"] * ep + m.coords_["ep"]) * shape.tp + m.coords_["tp"], holders);
  return m;
}

int Mesh::coord(const std::string& axis) const {
  auto it = coords_.find(axis);
  MT_REQUIRE(ConfigError, it != coords_.end(), "unknown mesh axis '", axis, "'");
  return it->second;
}

std::shared_ptr<ProcessGroup> Mesh::group_ptr(std::vector<std::string> axes) const {
  const std::string k = key(std::move(axes));
  auto it = groups_.find(k);
  MT_REQUIRE(ConfigError, it != groups_.end(), "mesh has no group '", k,
             "' (axes pp, dp, cp, tp in any combination, ep / edp alone, or pp+tp+ep)");
  return it->second;
}

ProcessGroup& Mesh::group(const std::string& axis) const { return *group_ptr({axis}); }
ProcessGroup& Mesh::group(std::vector<std::string> axes) const { return *group_ptr(std::move(axes)); }

}  // namespace meshtrain::comm
