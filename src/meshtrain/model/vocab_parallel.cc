#include "meshtrain/model/vocab_parallel.h"

#include "meshtrain/model/canonical_sum.h"
#include "meshtrain/model/token_batch.h"
#include "meshtrain/model/tree_reduce.h"

namespace meshtrain::model {

VocabSlice vocab_slice(const ParamSpec& table) {
  MT_CHECK(table.shape.rank() == 2, table.name, " is not a [vocab, d] table");
  return {table.global_offset[0], table.shape[0], table.global_shape[0]};
}

kernels::CrossEntropyResult vocab_parallel_cross_entropy(const kernels::KernelTable& k, const TpRegions& tp,
                                                         const Tensor& logits, const int32_t* targets,
                                                         const VocabSlice& slice, double grad_scale,
                                                         const Tensor& dlogits,
                                                         const std::shared_ptr<CachingAllocator>& alloc,
                                                         int64_t token_blocks) {
  const int64_t n = logits.dim(0);
  MT_CHECK(logits.dim(1) == slice.size, "logits of ", logits.dim(1), " columns for a vocabulary slice of ",
           slice.size);
  // The whole vocabulary on this rank: the serial kernel, whose row loops the
  // passes below reproduce (the same bits), runs all three sweeps of a row
  // while it is in cache: one read and one write of the logits instead of
  // three and two.
  const int blocks = tp.canonical_blocks();
  if (tp.size() == 1 && slice.size == slice.total && blocks == 0)
    return dlogits.defined() ? k.cross_entropy_backward(logits, targets, grad_scale, dlogits)
                             : k.cross_entropy(logits, targets);
  // [max | sum_exp | target_logit], one buffer so the two sums travel together.
  Tensor stats = activation(alloc, logits.dtype(), {3, n}, MemCategory::Workspace);
  const Tensor row_max = stats.slice(0, 1).view(Shape{n});
  const Tensor sums = stats.slice(1, 3);
  const Tensor sum_exp = sums.slice(0, 1).view(Shape{n}), target_logit = sums.slice(1, 2).view(Shape{n});
  k.vocab_ce_max(logits, targets, slice.total, row_max);
  tp.all_reduce(row_max, comm::ReduceOp::Max);
  // Each canonical block of the vocabulary summed on its own, the blocks in
  // the tree (reproducible mode, docs/math.md (M.73)); with the mode off the
  // slice is one block.
  const std::vector<Extent> blocks_here = slice_blocks(slice.total, blocks, slice.begin, slice.size, "the vocabulary");
  BlockTree tree;
  for (size_t j = 0; j < blocks_here.size(); ++j) {
    const Extent e = blocks_here[j];
    const Tensor part = j == 0 ? sums : activation(alloc, logits.dtype(), {2, n}, MemCategory::Workspace);
    k.vocab_ce_sums(logits, targets, slice.begin, row_max, part.slice(0, 1).view(Shape{n}),
                    part.slice(1, 2).view(Shape{n}), dlogits, e.offset, e.offset + e.length);
    tree.push(part);
  }
  tp.all_reduce(sums);  // the target logit: 0 on every rank but its holder's, so the sum is exact
  if (token_blocks == 0)
    return k.vocab_ce_finish(targets, slice.begin, row_max, sum_exp, target_logit, grad_scale, dlogits);
  // Canonical token blocks: each block's loss on its own, the blocks in the tree.
  std::vector<double> block_loss;
  kernels::CrossEntropyResult total;
  for (int64_t j = 0; j < token_blocks; ++j) {
    const Extent e = canonical_block(n, int(token_blocks), int(j));
    const auto rows = [&](const Tensor& t) { return t.defined() ? t.slice(e.offset, e.offset + e.length) : t; };
    const kernels::CrossEntropyResult part = k.vocab_ce_finish(
        targets + e.offset, slice.begin, rows(row_max), rows(sum_exp), rows(target_logit), grad_scale, rows(dlogits));
    block_loss.push_back(part.loss_sum);
    total.count += part.count;
  }
  total.loss_sum = tree_sum(block_loss);
  return total;
}

}  // namespace meshtrain::model
