// Reproducible gradient accumulation (docs/math.md, "Reproducible mode: the fixed
// summation tree", (M.10)): each micro-batch's gradient of a unit goes into a
// fresh leaf buffer, and leaves are summed in one fixed binary tree over the
// micro-batch index as they close (a binary counter: at most log2(G) + 1 buffers
// per unit alive). With G a power of two the root is the subtree of the window's
// global tree that this rank's contiguous micro-batches form, so a tree reduction
// across replicas (tree_reduce.h) finishes exactly the tree one rank would build.
//
// Tied lanes: a tied embedding's unit keeps the embedding's writes (lane 0)
// and the LM head's (lane 1) apart, so a layout holding both on one rank
// sums them where a pipeline does, after the data-parallel reduction
// (docs/math.md (M.10), "Tied lanes").
//
// Lanes: an expert's owner under expert parallelism computes the gradients
// of its ep group's ranks (consecutive data-parallel ranks: the leaves
// (source, micro-batch) form one aligned subtree of the global tree). Each
// source gets a lane of its own — its own leaves and binary counter — and
// the root sums the lanes' roots in a tree over the source index: the same
// tree the sources would build apart and reduce.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/model/canonical_sum.h"

namespace meshtrain::parallel {

class GradTree {
 public:
  // lanes[u]: unit u's lanes (a power of two; empty: one per unit).
  // first_leaf: the window index of this rank's first micro-batch when the
  // replicas' counts are uneven (docs/math.md (M.75)): its leaves then end
  // as the aligned subtrees of its span (parts), not one root.
  GradTree(int units, DType dtype, std::shared_ptr<CachingAllocator> alloc, std::vector<int> lanes = {},
           int64_t first_leaf = 0);
  // Lane `lane`'s open leaf of unit u (a zeroed buffer of `numel`), opened if none is.
  Tensor leaf(int u, int64_t numel, int lane = 0);
  bool has_open_leaf(int u) const;  // in any lane
  int lanes(int u) const { return int(lanes_[size_t(u)].size()); }
  // Closes u's open leaf in every lane (a lane nothing wrote to this
  // micro-batch closes a zero leaf): pushes it and sums equal levels
  // (left += right).
  void close_leaf(int u);
  // The root after a power-of-two number of closed leaves (else an error);
  // with several lanes, their roots summed (once per window) in a tree over
  // the lane index.
  Tensor root(int u);
  // One lane's root, the lanes left apart (a tied weight's writers: each
  // lane reduced over the replicas before they are added).
  Tensor lane_root(int u, int lane);
  // One lane's aligned subtrees of the rank's span, in leaf order.
  std::vector<Tensor> lane_parts(int u, int lane) const;
  void clear();  // a new window
  int depth(int u) const { return int(lanes_[size_t(u)][0].tree.subtrees()); }

 private:
  struct Lane {
    Tensor open;
    model::BlockTree tree;  // the closed leaves' binary counter
  };
  DType dtype_;
  std::shared_ptr<CachingAllocator> alloc_;
  std::vector<std::vector<Lane>> lanes_;
  std::vector<int64_t> numel_;  // per unit, from its first leaf
  std::vector<char> combined_;  // per unit: lanes summed into lane 0 this window
};

}  // namespace meshtrain::parallel
