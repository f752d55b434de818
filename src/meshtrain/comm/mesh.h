// Mesh: typed axes over the world's ranks (axis.h: pp, dp, cp, tp; tp
// innermost = fastest-varying rank, so the chattiest group is closest). The
// expert axes ep and edp are carved out of dp x cp and never multiply into
// the device count (docs/math.md (M.61)): world = pp * dp * cp * tp.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "meshtrain/comm/axis.h"
#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm {

// Pure layout arithmetic (no communication), testable on one rank.
struct MeshShape {
  int pp = 1, dp = 1, cp = 1, tp = 1;
  int ep = 1;  // expert parallel size: divides dp * cp

  int size(Axis a) const;     // edp = dp * cp / ep
  int size(Axes axes) const;  // the product over the set
  int world_size() const { return pp * dp * cp * tp; }
  // ConfigError with the product spelled out when it does not match.
  void validate(int world) const;
  std::string str() const;  // "pp=1 dp=2 cp=1 tp=2 (ep=2)"

  // Coordinates of `rank` on every axis (ep/edp inside dp x cp:
  // i = dp_coord * cp + cp_coord; ep coord = i % ep, edp coord = i / ep).
  MeshCoords coords(int rank) const;
  int rank_of(const MeshCoords& c) const;  // from pp, dp, cp, tp
  // The world ranks of `rank`'s group over `axes` in group rank order
  // (ascending): those agreeing with it on every axis outside the set. A
  // set with ep or edp is read in the coordinates (pp, edp, ep, tp).
  std::vector<int> members(int rank, Axes axes) const;
};

// A rank's groups over the axis sets every layout uses (group_axes()),
// created collectively (split) when the Mesh is built: every subset of
// {pp, dp, cp, tp}, ep (ranks exchanging tokens with each other's experts),
// edp (replicas of the same experts) and pp+tp+ep (every holder of some
// expert: the model axes times ep). A group is named by its axes' key
// ("pp+tp"), the name CommStats and the planner report.
class Mesh {
 public:
  Mesh() = default;
  // Collective over `world`: every rank must call it with the same shape.
  static Mesh create(const MeshShape& shape, const std::shared_ptr<ProcessGroup>& world);
  static const std::vector<Axes>& group_axes();

  const MeshShape& shape() const { return shape_; }
  int rank() const { return rank_; }
  int coord(Axis a) const { return coords_[a]; }
  const MeshCoords& coords() const { return coords_; }
  ProcessGroup& group(Axes axes) const { return *group_ptr(axes); }
  std::shared_ptr<ProcessGroup> group_ptr(Axes axes) const;
  // By name ("dp", "pp+tp"): for tools and tests that print or read names.
  ProcessGroup& group(std::string_view key) const { return group(Axes::parse(key)); }
  ProcessGroup& group(std::initializer_list<std::string_view> names) const;
  ProcessGroup& world() const { return *world_; }

 private:
  MeshShape shape_;
  int rank_ = 0;
  MeshCoords coords_;
  std::shared_ptr<ProcessGroup> world_;
  std::map<Axes, std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace meshtrain::comm
