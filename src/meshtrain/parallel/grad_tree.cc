#include "meshtrain/parallel/grad_tree.h"

#include <algorithm>

#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/model/tree_reduce.h"

namespace meshtrain::parallel {

GradTree::GradTree(int units, DType dtype, std::shared_ptr<CachingAllocator> alloc, std::vector<int> lanes,
                   int64_t first_leaf)
    : dtype_(dtype), alloc_(std::move(alloc)), lanes_(size_t(units)), numel_(size_t(units), -1),
      combined_(size_t(units), 0) {
  for (int u = 0; u < units; ++u) {
    const int n = lanes.empty() ? 1 : lanes[size_t(u)];
    MT_CHECK(n >= 1 && model::is_power_of_two(n), "unit ", u, ": ", n, " gradient lanes (a power of two)");
    lanes_[size_t(u)].resize(size_t(n), Lane{Tensor(), model::BlockTree(first_leaf)});
  }
}

Tensor GradTree::leaf(int u, int64_t numel, int lane) {
  MT_CHECK(lane >= 0 && lane < lanes(u), "unit ", u, " has no gradient lane ", lane);
  MT_CHECK(numel_[size_t(u)] < 0 || numel_[size_t(u)] == numel, "unit ", u, ": leaves of ", numel, " and ",
           numel_[size_t(u)], " elements");
  numel_[size_t(u)] = numel;
  Tensor& t = lanes_[size_t(u)][size_t(lane)].open;
  if (!t.defined()) t = Tensor::zeros(Shape{numel}, dtype_, alloc_, MemCategory::Grads);
  return t;
}

bool GradTree::has_open_leaf(int u) const {
  for (const Lane& l : lanes_[size_t(u)])
    if (l.open.defined()) return true;
  return false;
}

void GradTree::close_leaf(int u) {
  MT_CHECK(has_open_leaf(u), "unit ", u, ": no open gradient leaf to close");
  for (int lane = 0; lane < lanes(u); ++lane) {
    Lane& l = lanes_[size_t(u)][size_t(lane)];
    if (!l.open.defined()) leaf(u, numel_[size_t(u)], lane);  // nothing from this source: a zero leaf
    l.tree.push(l.open);
    l.open = Tensor();
  }
}

namespace {
void require_one_tree(int u, size_t subtrees) {
  MT_REQUIRE(ConfigError, subtrees == 1, "reproducible accumulation of unit ", u, " ended with ", subtrees,
             " partial trees: the micro-batches per window must be a power of two");
}
}  // namespace

Tensor GradTree::lane_root(int u, int lane) {
  MT_CHECK(!combined_[size_t(u)] && lane >= 0 && lane < lanes(u), "unit ", u, ": no lane ", lane, " left apart");
  const Lane& l = lanes_[size_t(u)][size_t(lane)];
  require_one_tree(u, l.tree.subtrees());
  return l.tree.root();
}

std::vector<Tensor> GradTree::lane_parts(int u, int lane) const {
  MT_CHECK(!combined_[size_t(u)] && lane >= 0 && lane < lanes(u), "unit ", u, ": no lane ", lane, " left apart");
  return lanes_[size_t(u)][size_t(lane)].tree.parts();
}

Tensor GradTree::root(int u) {
  auto& lanes = lanes_[size_t(u)];
  if (combined_[size_t(u)]) return lanes[0].tree.root();
  for (const Lane& l : lanes) require_one_tree(u, l.tree.subtrees());
  // Lane roots in a tree over the lane index: (l0 + l1) + (l2 + l3), ...
  model::BlockTree over_lanes;
  for (const Lane& l : lanes) over_lanes.push(l.tree.root());
  combined_[size_t(u)] = 1;
  return over_lanes.root();
}

void GradTree::clear() {
  for (auto& unit : lanes_)
    for (Lane& l : unit) l.tree.clear(), l.open = Tensor();
  std::fill(combined_.begin(), combined_.end(), 0);
}

}  // namespace meshtrain::parallel
