// Reproducible mode's canonical blocks (docs/math.md (M.73)): a sum over a
// dimension that tensor parallelism splits (a row-parallel GEMM's K, the
// input gradient of column-parallel layers, the softmax over the
// vocabulary) is computed on every layout, one rank included, as the same
// `blocks` blocks of that dimension (a balanced split), each block summed
// the same way, and the blocks added in one fixed binary tree. A rank
// holding a slice of whole blocks builds the subtree of its blocks; the
// tensor-parallel group's tree all-reduce (tree_reduce.h) finishes
// the tree one rank builds alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "meshtrain/core/subtree_counter.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/model/layers.h"
#include "meshtrain/model/parameters.h"
#include "meshtrain/model/placement.h"
#include "meshtrain/model/regions.h"
#include "meshtrain/model/token_batch.h"

namespace meshtrain::model {

// Block i of `blocks` over a dimension of n elements (the first n % blocks
// one element longer).
Extent canonical_block(int64_t n, int blocks, int i);

// The canonical blocks that the slice [offset, offset + length) of a
// dimension of n is made of, as extents of the slice (one extent, the whole
// slice, when blocks <= 1: the mode off); ConfigError naming `what` when the
// slice is not whole blocks. `first`, when given, receives the first
// block's index (0 when blocks <= 1).
std::vector<Extent> slice_blocks(int64_t n, int blocks, int64_t offset, int64_t length, std::string_view what,
                                 int* first = nullptr);

// The blocks of a parameter's dimension `dim` this rank holds.
std::vector<Extent> local_blocks(const ParamSpec& p, int dim, int blocks, int* first = nullptr);

// Adds leaf tensors in a binary tree as they come (core/subtree_counter.h:
// equal levels are added at once, left += right): after 2^q leaves the
// first leaf's tensor holds the tree sum. Also the gradient tree's counter
// (parallel/grad_tree.h). The first leaf may sit at any index of a larger
// tree (a replica's span, docs/math.md (M.75)): two subtrees are added only
// where they are siblings there, so the leaves of [1, 7) end as the
// subtrees [1, 2) [2, 4) [4, 6) [6, 7) (model/span_tree.h).
class BlockTree {
 public:
  explicit BlockTree(int64_t first_leaf = 0) : counter_(first_leaf) {}
  void push(const Tensor& leaf);
  // Subtrees still apart: 1 after a power of two of leaves.
  size_t subtrees() const { return sums_.size(); }
  const Tensor& root() const;  // with one subtree (else an error)
  // The sum of any number of leaves: the subtrees still apart added right
  // to left (the last two first), into the first leaf's tensor; ends the tree.
  const Tensor& fold();
  const std::vector<Tensor>& parts() const { return sums_; }  // the subtrees' sums, in leaf order
  void clear() { counter_.clear(), sums_.clear(); }

 private:
  SubtreeCounter counter_;
  std::vector<Tensor> sums_;  // subtree i's sum in slot i
};

// One term of a sum of products: a [M, K] times op(w) with K w's dimension
// 1 (trans_w: y = a w^T, a row-parallel layer's forward) or 0 (dx = dy w,
// a column-parallel layer's input gradient).
struct GemmTerm {
  Tensor a;
  const Parameter* w = nullptr;
  bool trans_w = false;
};

// out [M, N] = sum over terms of a op(w), as the canonical blocks of the
// rank's slice of K: block j's partial is the terms' products over block j
// (the first written, the others added, in term order), and the partials
// are summed in the block tree. The blocks are the first term's; another
// term may hold more (a KV head shared by several ranks holds the whole
// head's blocks, of which its rank's are added: docs/math.md (M.76)). With
// one block (blocks <= 1: the mode off) these are the plain
// GEMMs, `base` (undefined, or out's shape) added inside the first one:
// out = base + sum (a residual; only with one block).
void canonical_gemm_sum(const kernels::KernelTable& k, const std::vector<GemmTerm>& terms, int blocks,
                        const Tensor& out, const std::shared_ptr<CachingAllocator>& alloc, const Tensor& base = {});

// The rows of this rank's stream rows (of b's n tokens) that form each of
// its canonical token blocks: the micro-batch's tokens in b.token_blocks
// blocks (tp.canonical_blocks() where b is in its rows' order); under
// sequence parallelism a rank holds blocks/tp of them (its rows: whole
// blocks, ConfigError otherwise).
std::vector<Extent> token_blocks(const TpRegions& tp, const TokenBatch& b);

// Reproducible mode's sums over tokens of replicated parameters' gradients
// (a norm's weight and bias; a row-parallel layer's bias): each canonical
// token block's sum on its own, the blocks in the tree, the ranks' subtrees
// summed over the group under sequence parallelism, then added to the
// gradient. The same bits on every layout, as one micro-batch's part.
void canonical_norm_backward(const kernels::KernelTable& k, const Norm& norm, const Tensor& x, const Norm::Stats& s,
                             const Tensor& dy, const Tensor& dx, const TpRegions& tp, const TokenBatch& b,
                             const std::shared_ptr<CachingAllocator>& alloc);
void canonical_bias_grad(const kernels::KernelTable& k, Parameter& bias, const Tensor& dy, const TpRegions& tp,
                         const TokenBatch& b, const std::shared_ptr<CachingAllocator>& alloc);
// A replicated table's rows (learned positions): ids are this rank's rows'.
void canonical_embedding_grad(const kernels::KernelTable& k, Parameter& table, const int32_t* ids,
                              const Tensor& dout, const TpRegions& tp, const TokenBatch& b,
                              const std::shared_ptr<CachingAllocator>& alloc);

}  // namespace meshtrain::model
