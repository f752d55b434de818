#include "meshtrain/model/layers.h"

#include <algorithm>
#include <vector>

#include "meshtrain/model/canonical_sum.h"

namespace meshtrain::model {

namespace {
// The adding writers of a gradient: a stale one (Parameter::grad_stale) is zeroed first.
void add_bias_grad(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy) {
  bias.settle_grad();
  k.bias_grad(bias.grad, dy);
}

void add_embedding_grad(const kernels::KernelTable& k, Parameter& table, const int32_t* ids, const Tensor& dout,
                        int64_t vocab_begin) {
  table.settle_grad();
  k.embedding_slice_backward(ids, dout, vocab_begin, table.grad);
}

// Canonical token block j of a [n, ...] tensor's rows.
Tensor block_rows(const Tensor& t, int64_t blocks, int64_t j) {
  const Extent e = canonical_block(t.dim(0), int(blocks), int(j));
  return t.slice(e.offset, e.offset + e.length);
}

// grad (+)= the sum over canonical token blocks of what write(block j,
// leaf, overwrite) puts into leaf j, the blocks in the tree (docs/math.md
// (M.74)). A stale gradient is the first leaf itself (the GEMM's beta 0);
// otherwise the leaves are apart and the root is added. `zeroed`: leaves
// for writers that only add.
template <class Write>
void block_sum(const kernels::KernelTable& k, Parameter& p, int64_t blocks, bool zeroed,
               const std::shared_ptr<CachingAllocator>& alloc, Write&& write) {
  const bool first = !zeroed && p.take_first_grad_write();
  if (zeroed) p.settle_grad();
  BlockTree tree;
  for (int64_t j = 0; j < blocks; ++j) {
    const bool in_place = first && j == 0;
    const Tensor leaf = in_place ? p.grad
                        : zeroed ? Tensor::zeros(p.grad.shape(), p.grad.dtype(), alloc, MemCategory::Workspace)
                                 : Tensor::empty(p.grad.shape(), p.grad.dtype(), alloc, MemCategory::Workspace);
    write(j, leaf);
    tree.push(leaf);
  }
  if (!first) k.add(p.grad, tree.root());
}

void blocked_bias(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, int64_t blocks,
                  const std::shared_ptr<CachingAllocator>& alloc) {
  block_sum(k, bias, blocks, true, alloc,
            [&](int64_t j, const Tensor& leaf) { k.bias_grad(leaf, block_rows(dy, blocks, j)); });
}

// The weight's block sum in one kernel where the device has it
// (KernelTable::gemm_block_tree: the same bits, no leaves in memory).
bool fused_weight_sum(const kernels::KernelTable& k, Parameter& w, const Tensor& x, const Tensor& dy,
                      int64_t blocks) {
  std::vector<std::pair<int64_t, int64_t>> k_blocks;
  for (int64_t j = 0; j < blocks; ++j) {
    const Extent e = canonical_block(x.dim(0), int(blocks), int(j));
    k_blocks.push_back({e.offset, e.length});
  }
  if (!k.gemm_block_tree({{dy, true, x, false, std::move(k_blocks)}}, !w.grad_stale, w.grad)) return false;
  w.take_first_grad_write();
  return true;
}

void blocked_weights(const kernels::KernelTable& k, const std::vector<const Linear*>& layers, const Tensor& x,
                     const std::vector<Tensor>& dys, int64_t blocks, const std::shared_ptr<CachingAllocator>& alloc) {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!fused_weight_sum(k, *layers[i]->weight, x, dys[i], blocks))
      block_sum(k, *layers[i]->weight, blocks, false, alloc, [&](int64_t j, const Tensor& leaf) {
        k.gemm(true, false, 1.0, block_rows(dys[i], blocks, j), block_rows(x, blocks, j), 0.0, leaf);
      });
    if (layers[i]->bias) blocked_bias(k, *layers[i]->bias, dys[i], blocks, alloc);
  }
}

// The table's gradient over canonical token blocks, on the rows the tokens
// touch only: each block scatters into a compact leaf of those rows (in
// increasing id order; each row's tokens in order, as the dense scatter),
// the leaves are summed in the tree and the root's rows added to theirs.
void blocked_embedding(const kernels::KernelTable& k, Parameter& table, const int32_t* ids, const Tensor& dout,
                       int64_t vocab_begin, int64_t blocks, const std::shared_ptr<CachingAllocator>& alloc) {
  const int64_t n = dout.dim(0), rows = table.grad.dim(0);
  std::vector<int32_t> touched;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= vocab_begin && ids[i] < vocab_begin + rows) touched.push_back(ids[i]);
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  table.settle_grad();
  if (touched.empty()) return;  // no token of this vocabulary slice
  std::vector<int32_t> compact(static_cast<size_t>(n), -1);  // -1: another rank's vocabulary slice
  for (int64_t i = 0; i < n; ++i) {
    const auto at = std::lower_bound(touched.begin(), touched.end(), ids[i]);
    if (at != touched.end() && *at == ids[i]) compact[size_t(i)] = int32_t(at - touched.begin());
  }
  const Shape leaf_shape{int64_t(touched.size()), table.grad.dim(1)};
  BlockTree tree;
  for (int64_t j = 0; j < blocks; ++j) {
    const Tensor leaf = Tensor::zeros(leaf_shape, table.grad.dtype(), alloc, MemCategory::Workspace);
    k.embedding_slice_backward(compact.data() + canonical_block(n, int(blocks), int(j)).offset,
                               block_rows(dout, blocks, j), 0, leaf);
    tree.push(leaf);
  }
  k.embedding_slice_backward(touched.data(), tree.root(), vocab_begin, table.grad);
}
}  // namespace

Tensor as_operand(const kernels::KernelTable& k, const Tensor& t, DType dtype,
                  const std::shared_ptr<CachingAllocator>& alloc, MemCategory cat) {
  if (!t.defined() || t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype, alloc, cat);
  k.convert(out, t);
  return out;
}

void GatheredRows::for_row_blocks(const std::function<void(const Tensor& rows, int64_t first_row)>& f) const {
  if (!own.defined()) return f(full, 0);
  const int64_t n = full.dim(0), end = first + own.dim(0);
  f(own, first);
  arrive();
  if (first > 0) f(full.slice(0, first), 0);
  if (end < n) f(full.slice(end, n), end);
}

Tensor GatheredRows::for_operand_blocks(const kernels::KernelTable& k, DType op,
                                        const std::shared_ptr<CachingAllocator>& alloc, MemCategory cat,
                                        const std::function<void(const Tensor& rows, int64_t first_row)>& f) const {
  if (full.dtype() == op) {
    for_row_blocks(f);
    return full;
  }
  const Tensor all = Tensor::empty(full.shape(), op, alloc, cat);
  for_row_blocks([&](const Tensor& rows, int64_t r0) {
    const Tensor converted = all.slice(r0, r0 + rows.dim(0));
    k.convert(converted, rows);
    f(converted, r0);
  });
  return all;
}

void round_to_bf16(const kernels::KernelTable& k, const Tensor& x, const std::shared_ptr<CachingAllocator>& alloc) {
  k.convert(x, as_operand(k, x, DType::BF16, alloc, MemCategory::Workspace));
}

void Linear::forward(const kernels::KernelTable& k, const Tensor& x, const Tensor& y, const Tensor& base) const {
  if (base.defined())
    k.gemm_onto(false, true, 1.0, x, weight->value, base, y);
  else
    k.gemm(false, true, 1.0, x, weight->value, 0.0, y);
  if (bias) k.add_row_bias(y, bias->value);
}

void Linear::backward_input(const kernels::KernelTable& k, const Tensor& dy, const Tensor& dx,
                            bool accumulate_dx) const {
  k.gemm(false, false, 1.0, dy, weight->value, accumulate_dx ? 1.0 : 0.0, dx);
}

void Linear::backward_weight(const kernels::KernelTable& k, const Tensor& x, const Tensor& dy) const {
  backward_weights(k, {this}, x, {dy});
}

void backward_weights(const kernels::KernelTable& k, const std::vector<const Linear*>& layers, const Tensor& x,
                      const std::vector<Tensor>& dys) {
  MT_CHECK(layers.size() == dys.size(), layers.size(), " layers with ", dys.size(), " output gradients");
  std::vector<kernels::KernelTable::GemmRows> rows;
  for (size_t i = 0; i < layers.size(); ++i) {
    Parameter& w = *layers[i]->weight;
    rows.push_back({dys[i], w.take_first_grad_write() ? 0.0 : 1.0, w.grad});
  }
  k.gemm_shared_b(true, false, 1.0, rows, x);
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i]->bias) add_bias_grad(k, *layers[i]->bias, dys[i]);
}

Norm::Stats Norm::forward(const kernels::KernelTable& k, const Tensor& x, const Tensor& y,
                          const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = x.numel() / d;
  Stats s;
  s.rstd = Tensor::empty(Shape{n}, x.dtype(), alloc, MemCategory::Activations);
  if (kind == NormKind::LayerNorm) s.mean = Tensor::empty(Shape{n}, x.dtype(), alloc, MemCategory::Activations);
  k.norm_forward(x, weight->value, bias ? bias->value : Tensor(), eps, y, s.mean, s.rstd);
  return s;
}

void Norm::backward(const kernels::KernelTable& k, const Tensor& x, const Stats& s, const Tensor& dy,
                    const Tensor& dx) const {
  weight->settle_grad();
  if (bias) bias->settle_grad();
  k.norm_backward(x, weight->value, s.mean, s.rstd, dy, dx, weight->grad, bias ? bias->grad : Tensor());
}

Tensor WeightGrads::keep(const kernels::KernelTable& k, const Tensor& t, bool changes) const {
  if (!changes) return t;
  if (!jobs_.empty() && !jobs_.back().dys.empty()) {
    const Job& last = jobs_.back();
    const Tensor& copied = last.dys.back();
    if (last.dy_source == t.raw() && copied.raw() != t.raw() && copied.numel() == t.numel())
      return copied;  // the previous job already copied it
  }
  Tensor copy = Tensor::empty(t.shape(), t.dtype(), alloc_, defer_ ? MemCategory::Activations : MemCategory::Workspace);
  k.copy(copy, t);
  return copy;
}

void WeightGrads::hold() {
  if (!defer_) holding_ = true;
}

void WeightGrads::release(const kernels::KernelTable& k) {
  if (!holding_) return;
  holding_ = false;
  run(k);
}

void WeightGrads::linear(const kernels::KernelTable& k, const Linear& l, const Tensor& x, const Tensor& dy,
                         bool dy_changes) {
  linears(k, {&l}, x, {dy}, dy_changes);
}

void WeightGrads::linears(const kernels::KernelTable& k, std::vector<const Linear*> layers, const Tensor& x,
                          const std::vector<Tensor>& dys, bool dy_changes) {
  if (!queues()) return weights_now(k, layers, x, dys, token_blocks_);
  Job j;
  j.token_blocks = token_blocks_;
  j.linears = std::move(layers);
  j.x = x;
  for (const Tensor& dy : dys) j.dys.push_back(keep(k, dy, dy_changes));
  j.dy_source = dys.back().raw();
  jobs_.push_back(std::move(j));
}

void WeightGrads::bias(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, bool dy_changes) {
  if (!queues()) return bias_now(k, bias, dy, token_blocks_);
  Job j;
  j.token_blocks = token_blocks_;
  j.bias = &bias;
  j.dys = {keep(k, dy, dy_changes)};
  j.dy_source = dy.raw();
  jobs_.push_back(std::move(j));
}

void WeightGrads::embedding(const kernels::KernelTable& k, Parameter& table, const int32_t* ids,
                            const Tensor& dout, bool dout_changes, int64_t vocab_begin) {
  if (!queues()) return embedding_now(k, table, ids, dout, vocab_begin, token_blocks_);
  Job j;
  j.token_blocks = token_blocks_;
  j.table = &table;
  j.ids = ids;
  j.vocab_begin = vocab_begin;
  j.dys = {keep(k, dout, dout_changes)};
  j.dy_source = dout.raw();
  jobs_.push_back(std::move(j));
}

void WeightGrads::weights_now(const kernels::KernelTable& k, const std::vector<const Linear*>& layers,
                              const Tensor& x, const std::vector<Tensor>& dys, int64_t blocks) const {
  if (blocks > 0) return blocked_weights(k, layers, x, dys, blocks, alloc_);
  backward_weights(k, layers, x, dys);
}

void WeightGrads::bias_now(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, int64_t blocks) const {
  if (blocks > 0) return blocked_bias(k, bias, dy, blocks, alloc_);
  add_bias_grad(k, bias, dy);
}

void WeightGrads::embedding_now(const kernels::KernelTable& k, Parameter& table, const int32_t* ids,
                                const Tensor& dout, int64_t vocab_begin, int64_t blocks) const {
  if (blocks > 0) return blocked_embedding(k, table, ids, dout, vocab_begin, blocks, alloc_);
  add_embedding_grad(k, table, ids, dout, vocab_begin);
}

void WeightGrads::call(std::function<void()> fn) {
  if (!queues()) return fn();
  Job j;
  j.token_blocks = token_blocks_;
  j.fn = std::move(fn);
  jobs_.push_back(std::move(j));
}

void WeightGrads::run(const kernels::KernelTable& k) {
  for (Job& j : jobs_) {
    if (j.fn)
      j.fn();
    else if (!j.linears.empty())
      weights_now(k, j.linears, j.x, j.dys, j.token_blocks);
    else if (j.bias)
      bias_now(k, *j.bias, j.dys[0], j.token_blocks);
    else
      embedding_now(k, *j.table, j.ids, j.dys[0], j.vocab_begin, j.token_blocks);
  }
  jobs_.clear();
}

}  // namespace meshtrain::model
