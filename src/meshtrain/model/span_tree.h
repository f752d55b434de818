// The fixed tree (docs/math.md (M.10)) over a window whose leaves the ranks
// hold in contiguous spans of any length: uneven micro-batch counts per
// data-parallel replica (docs/math.md (M.75)). A span's leaves form the
// maximal aligned power-of-two blocks of the tree (aligned_blocks), each
// summed on the rank; the nodes that cross spans are finished by the ranks
// whose spans meet them, over point-to-point messages, so every rank ends
// with the bits one rank summing the W leaves in order would get.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/tensor.h"

namespace meshtrain::model {

// Leaves [first, first + count) of the window (count 0: none).
struct LeafSpan {
  int64_t first = 0, count = 0;
  int64_t end() const { return first + count; }
};

// The span as the tree's largest aligned blocks, ascending: [1, 7) is
// [1, 2) [2, 4) [4, 6) [6, 7). The subtree roots a rank holds.
std::vector<LeafSpan> aligned_blocks(LeafSpan span);

// spans[r]: the leaves of group rank r; those with leaves partition [0, W),
// W a power of two (ConfigError otherwise). parts: this rank's subtree
// roots, one per aligned block of its span (a rank without leaves passes
// one buffer). Every rank ends with the window's root in parts[0]; the
// other parts are scratch.
void span_tree_all_reduce(comm::ProcessGroup& group, const std::vector<LeafSpan>& spans,
                          const std::vector<Tensor>& parts, const std::shared_ptr<CachingAllocator>& alloc);

}  // namespace meshtrain::model
