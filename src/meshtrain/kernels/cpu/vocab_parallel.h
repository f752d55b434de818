// Vocabulary-parallel embedding and cross-entropy (docs/math.md
// (M.39)-(M.40)): a rank holds the rows [vocab_begin, vocab_begin + Vl) of a
// vocabulary of V. ids [n] and targets [n] are global ids (target < 0:
// unsupervised); table [Vl, dim]; logits [n, Vl] are this rank's columns of
// the full logits, which are never formed. The cross-entropy runs in three
// passes around two reductions over the tensor-parallel group (the caller's):
//   1. row max of the local logits            -> all-reduce MAX
//   2. sum of exp(x - max), target logit       -> all-reduce SUM (the target
//      logit is 0 on every rank but the one holding it)
//   3. loss = max + log(sum) - target, dlogits = scale (softmax - onehot).
// With one rank (vocab_begin 0, Vl = V) the passes are the fused serial
// kernel (cross_entropy.h) cut in three: same loops, same bits.
#pragma once

#include <cstdint>

#include "meshtrain/kernels/cpu/cross_entropy.h"

namespace meshtrain::kernels {

// out[i] = table[ids[i] - vocab_begin] for ids in the slice, 0 otherwise.
// DataError naming the position for an id outside [0, V).
template <typename T>
void embedding_slice_forward(const int32_t* ids, int64_t n, const T* table, int64_t vocab_begin, int64_t Vl,
                             int64_t V, int64_t dim, T* out);
// dtable[ids[i] - vocab_begin] += dout[i] for ids in the slice (ACCUMULATES;
// tokens in order for every element, whatever the thread count).
template <typename T>
void embedding_slice_backward(const int32_t* ids, int64_t n, const T* dout, int64_t vocab_begin, int64_t Vl,
                              int64_t dim, T* dtable);

// Pass 1: row_max[i] = max_j logits[i, j] (0 for unsupervised rows).
// DataError for a target outside [0, V).
template <typename T>
void vocab_ce_max(const T* logits, const int32_t* targets, int64_t n, int64_t Vl, int64_t V, T* row_max);

// Pass 2 with the reduced max: sum_exp[i] = sum_j exp(logits[i, j] - max[i]),
// target_logit[i] = logits[i, target - vocab_begin] when the target is in
// the slice, else 0 (both 0 for unsupervised rows). exps (may alias
// logits; null in forward-only use) receives exp(logits - max). Rows of
// logits and exps are ld apart (>= Vl): a block of a wider slice's columns.
template <typename T>
void vocab_ce_sums(const T* logits, const int32_t* targets, int64_t n, int64_t Vl, int64_t ld, int64_t vocab_begin,
                   const T* row_max, T* sum_exp, T* target_logit, T* exps);

// Pass 3 with the reduced sums: the loss SUM (double, row order) and COUNT;
// with dlogits (holding pass 2's exps) also dlogits = grad_scale (softmax -
// onehot), zero for unsupervised rows.
template <typename T>
CrossEntropyResult vocab_ce_finish(const int32_t* targets, int64_t n, int64_t Vl, int64_t vocab_begin,
                                   const T* row_max, const T* sum_exp, const T* target_logit, T grad_scale,
                                   T* dlogits);

}  // namespace meshtrain::kernels
