#include "meshtrain/model/canonical_sum.h"

#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::model {

Extent canonical_block(int64_t n, int blocks, int i) { return split_extent(n, 1, blocks, i, "a canonical block"); }

std::vector<Extent> slice_blocks(int64_t n, int blocks, int64_t offset, int64_t length, std::string_view what,
                                 int* first) {
  if (first) *first = 0;
  if (blocks <= 1) return {Extent{0, length}};
  MT_REQUIRE(ConfigError, n >= blocks, what, ": ", n, " elements cannot form training.reproducible_blocks = ", blocks,
             " canonical blocks; lower training.reproducible_blocks");
  std::vector<Extent> out;
  for (int i = 0; i < blocks; ++i) {
    const Extent e = canonical_block(n, blocks, i);
    if (e.offset < offset || e.offset + e.length > offset + length) continue;
    if (first && out.empty()) *first = i;
    out.push_back({e.offset - offset, e.length});
  }
  const int64_t covered = out.empty() ? 0 : out.back().offset + out.back().length - out.front().offset;
  MT_REQUIRE(ConfigError, !out.empty() && out.front().offset == 0 && covered == length, what, ": the slice [", offset,
             ", ", offset + length, ") of ", n, " is not whole canonical blocks of training.reproducible_blocks = ",
             blocks, " (docs/math.md (M.73)); choose a block count the split divides");
  return out;
}

std::vector<Extent> local_blocks(const ParamSpec& p, int dim, int blocks, int* first) {
  return slice_blocks(p.global_shape[size_t(dim)], blocks, p.global_offset[size_t(dim)], p.shape[size_t(dim)], p.name,
                      first);
}

void BlockTree::push(const Tensor& leaf) {
  sums_.push_back(leaf);
  counter_.push([&](size_t left, size_t right) {
    kernels::kernels_for(sums_[right]).add(sums_[left], sums_[right]);  // left += right: (M.10)'s tree
  });
  sums_.resize(counter_.size());
}

const Tensor& BlockTree::fold() {
  MT_CHECK(!sums_.empty(), "folding a block tree without leaves");
  counter_.fold([&](size_t left, size_t right) { kernels::kernels_for(sums_[right]).add(sums_[left], sums_[right]); });
  sums_.resize(1);
  return sums_[0];
}

const Tensor& BlockTree::root() const {
  MT_CHECK(sums_.size() == 1, "block tree with ", sums_.size(), " open subtrees (leaves not a power of two)");
  return sums_[0];
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
                        const Tensor& out, const std::shared_ptr<CachingAllocator>& alloc, const Tensor& base) {
  std::vector<std::vector<Extent>> slices;
  std::vector<int> first;  // each term's first block's index
  for (const GemmTerm& t : terms) {
    int f = 0;
    slices.push_back(local_blocks(*t.w->spec, t.trans_w ? 1 : 0, blocks, &f));
    first.push_back(f);
  }
  const size_t count = slices.empty() ? 0 : slices.front().size();
  MT_CHECK(!base.defined() || count == 1, "a residual inside a sum of ", count, " canonical blocks");
  // Block first[0] + j of term t: a shared KV head's rank adds its own query heads' blocks of it (M.76).
  auto block_of = [&](size_t t, size_t j) {
    const int64_t at = first[0] + int64_t(j) - first[t];
    MT_CHECK(at >= 0 && at < int64_t(slices[t].size()), terms[t].w->spec->name, " lacks canonical block ",
             first[0] + j);
    return slices[t][size_t(at)];
  };
  if (count > 1) {  // in one kernel where the device has it: the same bits, no leaves in memory
    std::vector<kernels::KernelTable::BlockTerm> fused;
    for (size_t t = 0; t < terms.size(); ++t) {
      fused.push_back({terms[t].a, false, terms[t].w->value, terms[t].trans_w, {}});
      for (size_t j = 0; j < count; ++j) fused.back().k_blocks.push_back({block_of(t, j).offset, block_of(t, j).length});
    }
    if (k.gemm_block_tree(fused, false, out)) return;
  }
  BlockTree tree;
  for (size_t j = 0; j < count; ++j) {
    const Tensor part = j == 0 ? out : Tensor::empty(out.shape(), out.dtype(), alloc, MemCategory::Workspace);
    for (size_t t = 0; t < terms.size(); ++t) {
      const GemmTerm& term = terms[t];
      const Extent e = block_of(t, j);
      const Tensor& w = term.w->value;
      const bool whole = slices[t].size() == 1;
      const Tensor a_j = whole ? term.a : columns(k, term.a, e, alloc);
      const Tensor w_j = whole ? w : term.trans_w ? columns(k, w, e, alloc) : w.slice(e.offset, e.offset + e.length);
      if (t == 0 && base.defined())
        k.gemm_onto(false, term.trans_w, 1.0, a_j, w_j, base, part);
      else
        k.gemm(false, term.trans_w, 1.0, a_j, w_j, t == 0 ? 0.0 : 1.0, part);
    }
    tree.push(part);
  }
  if (count > 0) MT_CHECK(tree.root().raw() == out.raw(), "the block tree's root is not the output");
}

std::vector<Extent> token_blocks(const TpRegions& tp, const TokenBatch& b) {
  const int64_t n = b.n();
  const int blocks = b.token_blocks > 0 ? int(b.token_blocks) : tp.canonical_blocks();
  return slice_blocks(n, blocks, tp.first_row(n), tp.local_rows(n), "a micro-batch's tokens (rows x seq)");
}

namespace {
// rows e of a [rows, ...] or [rows] tensor (undefined stays undefined).
Tensor rows_of(const Tensor& t, Extent e) { return t.defined() ? t.slice(e.offset, e.offset + e.length) : t; }

// The gradients `grads` += the sum over this rank's canonical token blocks
// of what fill(block rows, leaf) writes into a zeroed leaf (the gradients'
// elements in order): the blocks in the tree, the ranks' subtrees summed
// over the group under sequence parallelism (M.73).
template <class Fill>
void token_sums(const kernels::KernelTable& k, const std::vector<Parameter*>& grads, const TpRegions& tp,
                const TokenBatch& b, const std::shared_ptr<CachingAllocator>& alloc, Fill&& fill) {
  const std::vector<Extent> blocks = token_blocks(tp, b);
  int64_t width = 0;
  for (const Parameter* p : grads) width += p->grad.numel();
  const Tensor leaves = Tensor::zeros(Shape{int64_t(blocks.size()), width}, grads[0]->grad.dtype(), alloc,
                                      MemCategory::Workspace);
  BlockTree tree;
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
                             const Tensor& dy, const Tensor& dx, const TpRegions& tp, const TokenBatch& b,
                             const std::shared_ptr<CachingAllocator>& alloc) {
  std::vector<Parameter*> grads{norm.weight};
  if (norm.bias) grads.push_back(norm.bias);
  token_sums(k, grads, tp, b, alloc, [&](Extent e, const Tensor& leaf) {
    k.norm_backward(rows_of(x, e), norm.weight->value, rows_of(s.mean, e), rows_of(s.rstd, e), rows_of(dy, e),
                    rows_of(dx, e), leaf.flat_slice(0, norm.d),
                    norm.bias ? leaf.flat_slice(norm.d, 2 * norm.d) : Tensor());
  });
}

void canonical_bias_grad(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, const TpRegions& tp,
                         const TokenBatch& b, const std::shared_ptr<CachingAllocator>& alloc) {
  token_sums(k, {&bias}, tp, b, alloc, [&](Extent e, const Tensor& leaf) { k.bias_grad(leaf, rows_of(dy, e)); });
}

void canonical_embedding_grad(const kernels::KernelTable& k, Parameter& table, const int32_t* ids,
                              const Tensor& dout, const TpRegions& tp, const TokenBatch& b,
                              const std::shared_ptr<CachingAllocator>& alloc) {
  token_sums(k, {&table}, tp, b, alloc, [&](Extent e, const Tensor& leaf) {
    k.embedding_backward(ids + e.offset, rows_of(dout, e), leaf.view(table.grad.shape()));
  });
}

}  // namespace meshtrain::model
