// Placements (docs/math.md (M.38), (M.61)): how a parameter's values sit on the tensor-
// parallel axis, and the pure arithmetic that turns a placement and a mesh
// coordinate into the box of the global tensor a rank holds. No
// communication here: the layout plan (parallel/layout_plan.h) adds the data
// and pipeline axes, gradient groups and ZeRO shards on top.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::model {

enum class PlacementKind : uint8_t { Replicate, Shard, Partial };

struct Placement {
  PlacementKind kind = PlacementKind::Replicate;
  int dim = -1;          // Shard: the tensor dim that is split
  int64_t granule = 1;   // Shard: split in whole granules (a head's rows), never inside one
  int max_pieces = 0;    // Shard: at most this many distinct pieces (0: one per rank). With fewer
                         // pieces than ranks each piece sits on size / pieces consecutive ranks
                         // (GQA with fewer KV heads than tensor-parallel ranks).

  static Placement replicate() { return {}; }
  static Placement shard(int dim, int64_t granule = 1, int max_pieces = 0) {
    return {PlacementKind::Shard, dim, granule, max_pieces};
  }
  static Placement partial() { return {PlacementKind::Partial}; }
  bool is_shard() const { return kind == PlacementKind::Shard; }
  // Distinct pieces over an axis of `size` ranks; ConfigError when they
  // cannot be whole (max_pieces neither divides nor is divided by size).
  int pieces(int size, const std::string& what) const;
  // The piece rank `coord` of `size` holds.
  int piece_of(int size, int coord) const { return coord / (size / pieces(size, "")); }
  // "R", "S(0)", "S(0)x2" (2 ranks per piece), "P"
  std::string str(int size = 1) const;
  bool operator==(const Placement&) const = default;
};

struct Extent {
  int64_t offset = 0, length = 0;
};

// Piece `index` of `parts` of a dim of `n` elements split in granules of
// `granule`: the first (n / granule) % parts pieces take one granule more, so
// uneven counts are placed, never rounded down. ConfigError naming `what`
// when n is not whole granules or there are fewer granules than parts.
Extent split_extent(int64_t n, int64_t granule, int parts, int index, const std::string& what);

// What one rank holds of the model: its tensor-parallel coordinate and the
// segments (embedding = 0, block l = l + 1, head = n_layers + 1) of its
// pipeline chunks. Segments and parameter units coincide, except for a
// tied weight's copy: the last pipeline stage holds the embedding unit to
// read it as its LM head without running the embedding segment.
struct ModelPartition {
  int tp_size = 1, tp_rank = 0;
  int ep_size = 1, ep_rank = 0;  // expert parallelism: the routed experts held are this rank's 1/ep
  std::vector<int> segments;    // ascending; empty: every segment
  std::vector<int> copy_units;  // units held without their segment (a tied weight's copy)
  // The stream, norms and adds on n / tp rows per tensor-parallel rank
  // (regions.h); the layout plan sets it from its options, the one source.
  bool sequence_parallel = false;
  // Reproducible mode's canonical blocks (docs/math.md (M.73); 0: off): an
  // element-granular split (the vocabulary, hidden units) places whole
  // blocks of a balanced split into this many on each rank, so a rank's
  // slice is the same blocks on every layout. The layout plan sets it.
  int canonical_blocks = 0;
  bool holds(int segment) const;
  bool holds_copy(int unit) const;  // a unit held without its segment (copy_units)
  static ModelPartition whole() { return {}; }
};

}  // namespace meshtrain::model
