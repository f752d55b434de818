// Sums in one fixed binary tree over the ranks of a group (reproducible mode,
// docs/math.md (M.10)-(M.11)): at level k, rank r combines with r ^ 2^k, so
// the sum of every element is ((g0 + g1) + (g2 + g3)) + ... whatever the
// backend — the same tree a single rank builds over the same leaves. IEEE
// addition is commutative, so both partners of a level compute identical
// bits. The group size must be a power of two. Blocking; p2p messages only,
// except on a hierarchical group (comm/hierarchical_group.h), where the
// all-reduce runs the node's levels and the nodes' levels apart: the same
// tree, with 1/l of the bytes over the link.
#pragma once

#include "meshtrain/comm/process_group.h"
#include <memory>
#include <vector>

#include "meshtrain/core/tensor.h"

namespace meshtrain::model {

bool is_power_of_two(int64_t n);

// Every rank ends with the tree sum of `buf` (recursive doubling). Scratch
// comes from `alloc` (the rank's caching allocator).
void tree_all_reduce(comm::ProcessGroup& group, const Tensor& buf, const std::shared_ptr<CachingAllocator>& alloc);

// Rank r ends with chunk r of the tree sum in its own chunk r of `buf` (the
// rest is scratch); chunks are balanced as the collectives' (comm/types.h
// chunk_offset / chunk_size) (recursive halving: each level keeps the
// chunks whose index agrees with r in that bit).
void tree_reduce_scatter(comm::ProcessGroup& group, const Tensor& buf, const std::shared_ptr<CachingAllocator>& alloc);

// The tree sum of values indexed by their leaf position (power-of-two count).
double tree_sum(std::vector<double> values);

}  // namespace meshtrain::model
