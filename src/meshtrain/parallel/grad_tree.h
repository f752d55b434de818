// Reproducible gradient accumulation (SPEC S2): each micro-batch's gradient
// of a unit goes into a fresh leaf buffer, and leaves are summed in one
// fixed binary tree over the micro-batch index as they close (a binary
// counter: at most log2(G) + 1 buffers per unit alive). With G a power of
// two the root is the subtree of the window's global tree that this rank's
// contiguous micro-batches form, so a tree reduction across replicas
// (tree_reduce.h) finishes exactly the tree one rank would build.
#pragma once

#include <memory>
#include <vector>

#include "meshtrain/core/tensor.h"

namespace meshtrain::parallel {

class GradTree {
 public:
  GradTree(int units, DType dtype, std::shared_ptr<CachingAllocator> alloc)
      : dtype_(dtype), alloc_(std::move(alloc)), open_(size_t(units)), stack_(size_t(units)) {}
  // The open leaf of unit u (a zeroed buffer of `numel`), opened if none is.
  Tensor leaf(int u, int64_t numel);
  bool has_open_leaf(int u) const { return open_[size_t(u)].defined(); }
  // Closes u's open leaf: pushes it and sums equal levels (left += right).
  void close_leaf(int u);
  // The root after a power-of-two number of closed leaves (else an error).
  Tensor root(int u) const;
  void clear();  // a new window
  int depth(int u) const { return int(stack_[size_t(u)].size()); }

 private:
  struct Node {
    int level;
    Tensor sum;
  };
  DType dtype_;
  std::shared_ptr<CachingAllocator> alloc_;
  std::vector<Tensor> open_;
  std::vector<std::vector<Node>> stack_;
};

}  // namespace meshtrain::parallel
