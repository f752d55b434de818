#include "meshtrain/model/placement.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

int Placement::pieces(int size, const std::string& what) const {
  if (!is_shard() || max_pieces == 0 || max_pieces >= size) {
    if (is_shard() && max_pieces > size)
      MT_REQUIRE(ConfigError, max_pieces % size == 0, what, ": ", max_pieces, " pieces do not split over ", size,
                 " ranks (", max_pieces, " % ", size, " = ", max_pieces % size, ")");
    return is_shard() ? size : 1;
  }
  MT_REQUIRE(ConfigError, size % max_pieces == 0, what, ": ", max_pieces, " pieces cannot be shared evenly by ", size,
             " ranks (", size, " % ", max_pieces, " = ", size % max_pieces, ")");
  return max_pieces;
}

std::string Placement::str(int size) const {
  switch (kind) {
    case PlacementKind::Replicate: return "R";
    case PlacementKind::Partial: return "P";
    case PlacementKind::Shard: {
      std::string s = "S(" + std::to_string(dim) + ")";
      const int p = pieces(size, "placement");
      if (p < size) s.append("x").append(std::to_string(size / p));
      return s;
    }
  }
  return "?";
}

Extent split_extent(int64_t n, int64_t granule, int parts, int index, const std::string& what) {
  MT_CHECK(parts >= 1 && index >= 0 && index < parts, "piece ", index, " of ", parts);
  MT_REQUIRE(ConfigError, granule >= 1 && n % granule == 0, what, ": ", n, " elements are not whole granules of ",
             granule);
  const int64_t g = n / granule;
  MT_REQUIRE(ConfigError, g >= parts, what, ": ", g, " granule", (g == 1 ? "" : "s"), " of ", granule,
             " cannot be split over ", parts, " ranks (", g, " < ", parts, ")");
  const int64_t base = g / parts, extra = g % parts;
  const int64_t first = index * base + std::min<int64_t>(index, extra);
  const int64_t count = base + (index < extra ? 1 : 0);
  return {first * granule, count * granule};
}

bool ModelPartition::holds(int segment) const {
  return segments.empty() || std::binary_search(segments.begin(), segments.end(), segment);
}

bool ModelPartition::holds_copy(int unit) const {
  return std::find(copy_units.begin(), copy_units.end(), unit) != copy_units.end();
}

}  // namespace meshtrain::model
