#include "meshtrain/parallel/grad_tree.h"

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::parallel {

Tensor GradTree::leaf(int u, int64_t numel) {
  Tensor& t = open_[size_t(u)];
  if (!t.defined()) t = Tensor::zeros(Shape{numel}, dtype_, alloc_, MemCategory::Grads);
  return t;
}

void GradTree::close_leaf(int u) {
  auto& stack = stack_[size_t(u)];
  MT_CHECK(open_[size_t(u)].defined(), "unit ", u, ": no open gradient leaf to close");
  stack.push_back({0, std::move(open_[size_t(u)])});
  open_[size_t(u)] = Tensor();
  while (stack.size() >= 2 && stack[stack.size() - 1].level == stack[stack.size() - 2].level) {
    Node right = std::move(stack.back());
    stack.pop_back();
    kernels::kernels_for(right.sum).add(stack.back().sum, right.sum);
    stack.back().level += 1;
  }
}

Tensor GradTree::root(int u) const {
  const auto& stack = stack_[size_t(u)];
  MT_REQUIRE(ConfigError, stack.size() == 1, "reproducible accumulation of unit ", u, " ended with ", stack.size(),
             " partial trees: the micro-batches per window must be a power of two");
  return stack[0].sum;
}

void GradTree::clear() {
  for (auto& s : stack_) s.clear();
  for (auto& t : open_) t = Tensor();
}

}  // namespace meshtrain::parallel
