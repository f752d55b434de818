// Mesh: named axes over the world's ranks (pp, dp, cp, tp; tp innermost =
// fastest-varying rank, so the chattiest group is closest). An expert-
// parallel axis is carved out of dp x cp and never multiplied into the
// device count (SPEC S9): world = pp * dp * cp * tp.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm {

// Pure layout arithmetic (no communication), testable on one rank.
struct MeshShape {
  int pp = 1, dp = 1, cp = 1, tp = 1;
  int ep = 1;  // expert parallel size: divides dp * cp

  static const std::vector<std::string>& axis_names();  // {"pp","dp","cp","tp"} outer -> inner
  int size(const std::string& axis) const;              // also "ep", "edp"
  int world_size() const { return pp * dp * cp * tp; }
  // ConfigError with the product spelled out when it does not match.
  void validate(int world) const;
  std::string str() const;  // "pp=1 dp=2 cp=1 tp=2 (ep=2)"

  // Coordinates of `rank` along each axis (and ep/edp inside dp x cp:
  // i = dp_coord * cp + cp_coord; ep coord = i % ep, edp coord = i / ep).
  std::map<std::string, int> coords(int rank) const;
  int rank_of(const std::map<std::string, int>& coords) const;  // pp/dp/cp/tp
};

// A rank's groups along every axis and every combination of axes, created
// collectively (split) when the Mesh is built. Also "ep" (ranks sharing the
// same experts' tokens), "edp" (replicas of the same experts) and
// {"pp", "tp", "ep"} (every holder of some expert: the model axes times ep).
class Mesh {
 public:
  Mesh() = default;
  // Collective over `world`: every rank must call it with the same shape.
  static Mesh create(const MeshShape& shape, const std::shared_ptr<ProcessGroup>& world);

  const MeshShape& shape() const { return shape_; }
  int rank() const { return rank_; }
  int coord(const std::string& axis) const;
  ProcessGroup& group(const std::string& axis) const;
  ProcessGroup& group(std::vector<std::string> axes) const;
  // group({"dp", "cp"}): a braced list of literals (a plain std::string
  // overload alone would take it as an iterator pair).
  ProcessGroup& group(std::initializer_list<const char*> axes) const {
    return group(std::vector<std::string>(axes.begin(), axes.end()));
  }
  std::shared_ptr<ProcessGroup> group_ptr(std::vector<std::string> axes) const;
  ProcessGroup& world() const { return *world_; }

 private:
  static std::string key(std::vector<std::string> axes);
  MeshShape shape_;
  int rank_ = 0;
  std::map<std::string, int> coords_;
  std::shared_ptr<ProcessGroup> world_;
  std::map<std::string, std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace meshtrain::comm
