// Boxes: N-d rectangular pieces of a global row-major tensor. A checkpoint
// stores every logical tensor as a set of boxes (written by different ranks)
// and reads any box back, so a box is the unit of resharding: tensor
// parallelism stores dim slices, ZeRO flat shards decompose into a few boxes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/core/shape.h"

namespace meshtrain::checkpoint {

struct Box {
  std::vector<int64_t> offset, length;  // per dim; empty for a scalar
  int rank() const { return int(offset.size()); }
  int64_t numel() const;  // 1 for a scalar box
  bool operator==(const Box&) const = default;
  std::string str() const;  // "[0:4, 2:6]"
};

// The whole tensor as one box.
Box full_box(const Shape& global);

// True when `box` has the rank of `global`, non-negative offsets, positive
// lengths and lies inside it (overflow-safe).
bool box_inside(const Box& box, const Shape& global);

// Intersection of two boxes of equal rank, or nullopt when empty.
std::optional<Box> intersect(const Box& a, const Box& b);

// Minimal list of boxes (at most 2 * rank - 1) whose union is the flat
// row-major element range [begin, end) of `global`, in flat order. An empty
// range gives an empty list.
std::vector<Box> flat_range_to_boxes(const Shape& global, int64_t begin, int64_t end);

// Flat row-major range of part `index` of `parts` balanced parts of `global`
// (comm::chunk_offset rule), as boxes: how replicated tensors are split so
// every rank writes a share.
std::vector<Box> balanced_part_boxes(const Shape& global, int parts, int index);

// Copies `region` (inside both boxes) from `src` laid out row-major as
// `src_box` into `dst` laid out as `dst_box`; elements of `elem_size` bytes.
void copy_region(const void* src, const Box& src_box, void* dst, const Box& dst_box, const Box& region,
                 size_t elem_size);

// Contiguous runs of `region` inside a row-major `outer` box: calls
// fn(element offset inside outer, element offset inside region, run length)
// for every maximal run, in order. Used to turn box reads into few I/O calls.
template <typename Fn>
void for_each_run(const Box& outer, const Box& region, Fn&& fn);
// Segments contiguous in both a src_box and a dst_box buffer:
// fn(src pos, dst pos, n) (box_runs.h).
template <typename Fn>
void for_each_segment(const Box& src_box, const Box& dst_box, const Box& region, Fn&& fn);

}  // namespace meshtrain::checkpoint

#include "meshtrain/checkpoint/box_runs.h"
