// Vocabulary parallelism (docs/math.md (M.39)-(M.40)): the token embedding and
// the LM head are split by vocabulary rows over the tensor-parallel group
// (uneven when the vocabulary does not divide: 259 over 2 ranks is 130 + 129),
// and the loss is a cross-entropy that never forms the full logits on one
// rank: the row max, the target logit and the sum of exponentials are reduced
// over the group (one MAX of n values, one SUM of 2n), three passes of the
// kernel table around them (kernels/cpu/vocab_parallel.h).
#pragma once

#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/model/regions.h"

namespace meshtrain::model {

// Rows [begin, begin + size) of a vocabulary of `total`.
struct VocabSlice {
  int64_t begin = 0, size = 0, total = 0;
};
// The slice a [vocab, d] table's local box holds.
VocabSlice vocab_slice(const ParamSpec& table);

// Loss SUM and supervised COUNT over logits [n, slice.size] of this rank's
// vocabulary columns (targets < 0 unsupervised): the same values on every
// rank of the group, equal to the serial kernel's on one rank. With dlogits
// defined (it may alias logits, OVERWRITES) also dlogits = grad_scale *
// (softmax - onehot) for this rank's columns. Collective over tp's group.
// token_blocks: the rows' canonical token blocks (TokenBatch; 0: none):
// the loss is then each block's sum, the blocks in the tree (docs/math.md
// (M.74)).
kernels::CrossEntropyResult vocab_parallel_cross_entropy(const kernels::KernelTable& k, const TpRegions& tp,
                                                         const Tensor& logits, const int32_t* targets,
                                                         const VocabSlice& slice, double grad_scale,
                                                         const Tensor& dlogits,
                                                         const std::shared_ptr<CachingAllocator>& alloc, int64_t token_blocks = 0);

}  // namespace meshtrain::model
