// The shape of the fixed summation tree (docs/math.md (M.10)) as leaves
// arrive one by one: a binary counter of the subtrees still apart, subtree
// i in slot i. Equal levels are added at once (left += right) where they
// are siblings of the larger tree, and fold() adds what is left right to
// left. It says which slots to add, never how: model/canonical_sum.h's
// BlockTree adds tensors with it, the packed GEMM's and the attention
// backward's block trees add tiles in cache (kernels/cpu/per_isa), so all
// of them build the same tree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshtrain {

class SubtreeCounter {
 public:
  // The first leaf may sit at any index of a larger tree (a replica's span,
  // docs/math.md (M.75)): two subtrees are added only where they are
  // siblings there.
  explicit SubtreeCounter(int64_t first_leaf = 0) : first_(first_leaf), next_(first_leaf) {}

  // The next leaf, which the caller has put in slot size(): add(left,
  // right) for each addition it causes (slot left += slot right; right is
  // freed).
  template <class Add>
  void push(Add&& add) {
    nodes_.push_back({0, next_++});
    while (nodes_.size() >= 2) {
      const Node& left = nodes_[nodes_.size() - 2];
      if (left.level != nodes_.back().level || left.first % (int64_t(2) << left.level) != 0) break;
      add(nodes_.size() - 2, nodes_.size() - 1);
      nodes_.pop_back();
      nodes_.back().level += 1;
    }
  }
  // The subtrees still apart added right to left (the last two first) into
  // slot 0; ends the tree (one subtree left).
  template <class Add>
  void fold(Add&& add) {
    for (; nodes_.size() > 1; nodes_.pop_back()) add(nodes_.size() - 2, nodes_.size() - 1);
  }
  size_t size() const { return nodes_.size(); }  // the subtrees still apart: the next leaf's slot
  void clear() { nodes_.clear(), next_ = first_; }

 private:
  struct Node {
    int level;
    int64_t first;  // its first leaf's index
  };
  int64_t first_, next_;
  std::vector<Node> nodes_;
};

}  // namespace meshtrain
