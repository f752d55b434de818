#include "meshtrain/model/canonical_sum.h"

#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::model {

Extent canonical_block(int64_t n, int blocks, int i) { return split_extent(n, 1, blocks, i, "a canonical block"); }

BlockRange blocks_of_slice(int64_t n, int blocks, int64_t offset, int64_t length, std::string_view what) {
  if (blocks <= 1) return {0, 1};
  MT_REQUIRE(ConfigError, n >= blocks, what, ": ", n, " elements cannot form training.reproducible_blocks = ", blocks,
             " canonical blocks; lower training.reproducible_blocks");
  BlockRange r{-1, 0};
  for (int i = 0; i < blocks; ++i) {
    const Extent e = canonical_block(n, blocks, i);
    if (e.offset == offset) r.first = i;
    if (r.first >= 0 && e.offset + e.length <= offset + length) r.count = i - r.first + 1;
  }
  const bool whole = r.first >= 0 && r.count > 0 &&
                     canonical_block(n, blocks, r.first + r.count - 1).offset +
                             canonical_block(n, blocks, r.first + r.count - 1).length ==
                         offset + length;
  MT_REQUIRE(ConfigError, whole, what, ": the slice [", offset, ", ", offset + length, ") of ", n,
             " is not whole canonical blocks of training.reproducible_blocks = ", blocks,
             " (docs/math.md (M.73)); choose a block count the split divides");
  return r;
}

std::vector<Extent> local_blocks(const ParamSpec& p, int dim, int blocks) {
  const int64_t n = p.global_shape[size_t(dim)], offset = p.global_offset[size_t(dim)], length = p.shape[size_t(dim)];
  if (blocks <= 1) return {Extent{0, length}};
  const BlockRange r = blocks_of_slice(n, blocks, offset, length, p.name);
  std::vector<Extent> out;
  for (int j = 0; j < r.count; ++j) {
    Extent e = canonical_block(n, blocks, r.first + j);
    e.offset -= offset;
    out.push_back(e);
  }
  return out;
}

void BlockTree::push(const Tensor& leaf) {
  stack_.push_back({0, leaf});
  while (stack_.size() >= 2 && stack_[stack_.size() - 2].level == stack_.back().level) {
    Node right = std::move(stack_.back());
    stack_.pop_back();
    k_.add(stack_.back().sum, right.sum);  // left += right: (M.73)'s tree
    stack_.back().level += 1;
  }
}

const Tensor& BlockTree::root() const {
  MT_CHECK(stack_.size() == 1, "block tree with ", stack_.size(), " open subtrees (leaves not a power of two)");
  return stack_[0].sum;
}

namespace {
// Columns e of a [M, K] operand, contiguous.
Tensor columns(const kernels::KernelTable& k, const Tensor& t, Extent e, const std::shared_ptr<CachingAllocator>& alloc) {
  Tensor out = Tensor::empty(Shape{t.dim(0), e.length}, t.dtype(), alloc, MemCategory::Workspace);
  k.copy_columns(out, t, e.offset);
  return out;
}
}  // namespace

void canonical_gemm_sum(const kernels::KernelTable& k, const std::vector<GemmTerm>& terms, int blocks,
                        const Tensor& out, const std::shared_ptr<CachingAllocator>& alloc) {
  std::vector<std::vector<Extent>> slices;
  for (const GemmTerm& t : terms) slices.push_back(local_blocks(*t.w->spec, t.trans_w ? 1 : 0, blocks));
  const size_t count = slices.empty() ? 0 : slices.front().size();
  // A term holding another number of blocks (a KV head shared by several
  // ranks: each holds all of it) is added whole after the tree:
  // deterministic, not the same on every layout (verify --bitwise refuses it).
  std::vector<size_t> blocked, whole;
  for (size_t t = 0; t < terms.size(); ++t) (slices[t].size() == count ? blocked : whole).push_back(t);
  BlockTree tree(k);
  for (size_t j = 0; j < count; ++j) {
    const Tensor part = j == 0 ? out : Tensor::empty(out.shape(), out.dtype(), alloc, MemCategory::Workspace);
    for (const size_t t : blocked) {
      const GemmTerm& term = terms[t];
      const Extent e = slices[t][j];
      const Tensor& w = term.w->value;
      const Tensor a_j = count == 1 ? term.a : columns(k, term.a, e, alloc);
      const Tensor w_j = count == 1 ? w : term.trans_w ? columns(k, w, e, alloc) : w.slice(e.offset, e.offset + e.length);
      k.gemm(false, term.trans_w, 1.0, a_j, w_j, t == 0 ? 0.0 : 1.0, part);
    }
    tree.push(part);
  }
  if (count > 0) MT_CHECK(tree.root().raw() == out.raw(), "the block tree's root is not the output");
  for (const size_t t : whole) k.gemm(false, terms[t].trans_w, 1.0, terms[t].a, terms[t].w->value, 1.0, out);
}

std::vector<Extent> token_blocks(const TpRegions& tp, int64_t n) {
  const int blocks = tp.canonical_blocks();
  const int64_t rows = tp.local_rows(n), first = tp.first_row(n);
  const BlockRange r = blocks_of_slice(n, blocks, first, rows, "a micro-batch's tokens (rows x seq)");
  std::vector<Extent> out;
  for (int j = 0; j < r.count; ++j) {
    Extent e = blocks <= 1 ? Extent{0, rows} : canonical_block(n, blocks, r.first + j);
    if (blocks > 1) e.offset -= first;
    out.push_back(e);
  }
  return out;
}

namespace {
// rows e of a [rows, ...] or [rows] tensor (undefined stays undefined).
Tensor rows_of(const Tensor& t, Extent e) { return t.defined() ? t.slice(e.offset, e.offset + e.length) : t; }

// The gradients `grads` += the sum over this rank's canonical token blocks
// of what fill(block rows, leaf) writes into a zeroed leaf (the gradients'
// elements in order): the blocks in the tree, the ranks' subtrees summed
// over the group under sequence parallelism (M.73).
template <class Fill>
void token_sums(const kernels::KernelTable& k, const std::vector<Parameter*>& grads, const TpRegions& tp, int64_t n,
                const std::shared_ptr<CachingAllocator>& alloc, Fill&& fill) {
  const std::vector<Extent> blocks = token_blocks(tp, n);
  int64_t width = 0;
  for (const Parameter* p : grads) width += p->grad.numel();
  const Tensor leaves = Tensor::zeros(Shape{int64_t(blocks.size()), width}, grads[0]->grad.dtype(), alloc,
                                      MemCategory::Workspace);
  BlockTree tree(k);
  for (size_t j = 0; j < blocks.size(); ++j) {
    const Tensor leaf = leaves.slice(int64_t(j), int64_t(j) + 1).view(Shape{width});
    fill(blocks[j], leaf);
    tree.push(leaf);
  }
  const Tensor& sum = tree.root();
  if (tp.shards_rows()) tp.all_reduce(sum);
  int64_t at = 0;
  for (Parameter* p : grads) {
    p->settle_grad();
    k.add(p->grad, sum.flat_slice(at, at + p->grad.numel()));
    at += p->grad.numel();
  }
}
}  // namespace

void canonical_norm_backward(const kernels::KernelTable& k, const Norm& norm, const Tensor& x, const Norm::Stats& s,
                             const Tensor& dy, const Tensor& dx, const TpRegions& tp, int64_t n,
                             const std::shared_ptr<CachingAllocator>& alloc) {
  std::vector<Parameter*> grads{norm.weight};
  if (norm.bias) grads.push_back(norm.bias);
  token_sums(k, grads, tp, n, alloc, [&](Extent e, const Tensor& leaf) {
    k.norm_backward(rows_of(x, e), norm.weight->value, rows_of(s.mean, e), rows_of(s.rstd, e), rows_of(dy, e),
                    rows_of(dx, e), leaf.flat_slice(0, norm.d),
                    norm.bias ? leaf.flat_slice(norm.d, 2 * norm.d) : Tensor());
  });
}

void canonical_bias_grad(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, const TpRegions& tp,
                         int64_t n, const std::shared_ptr<CachingAllocator>& alloc) {
  token_sums(k, {&bias}, tp, n, alloc, [&](Extent e, const Tensor& leaf) { k.bias_grad(leaf, rows_of(dy, e)); });
}

void canonical_embedding_grad(const kernels::KernelTable& k, Parameter& table, const int32_t* ids,
                              const Tensor& dout, const TpRegions& tp, int64_t n,
                              const std::shared_ptr<CachingAllocator>& alloc) {
  token_sums(k, {&table}, tp, n, alloc, [&](Extent e, const Tensor& leaf) {
    k.embedding_backward(ids + e.offset, rows_of(dout, e), leaf.view(table.grad.shape()));
  });
}

}  // namespace meshtrain::model
