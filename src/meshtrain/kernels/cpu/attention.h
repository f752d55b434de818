// Causal self-attention, blockwise with online softmax (flash-style), GQA
// and packed documents. Layouts (row-major):
//   q, out, dq   [B, T, Hq, D]
//   k, v, dk, dv [B, T, Hkv, D]      Hq % Hkv == 0; query head h uses kv head h / (Hq/Hkv)
//   seg          [B, T] int32 document ids, or nullptr (one document per row):
//                query i attends key j iff j <= i and seg[i] == seg[j]
//   lse          [B, Hq, T] log-sum-exp of each row's scaled scores (max + log sum),
//                the per-row softmax state context parallelism merges (SPEC S8).
// Backward OVERWRITES dq, dk, dv.
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

struct AttentionShape {
  int64_t batch = 1, seq = 1, q_heads = 1, kv_heads = 1, head_dim = 1;
};

template <typename T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const int32_t* seg, T scale,
                       T* out, T* lse);

template <typename T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const int32_t* seg, T scale,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv);

// Partial softmax state of one query block against one key block, and the
// merge of two states (29.15)-(29.16): a = max(a1, a2),
// l = e^{a1-a} l1 + e^{a2-a} l2, o = e^{a1-a} o1 + e^{a2-a} o2, y = o / l.
// A fully masked row has a = -inf, l = 0, o = 0 and merges as an explicit
// zero contribution (no inf - inf).
template <typename T>
struct SoftmaxState {
  T* o;  // [rows, D] unnormalized output
  T* a;  // [rows] running max
  T* l;  // [rows] running exp-sum
};
template <typename T>
void softmax_state_merge(SoftmaxState<T> into, const SoftmaxState<T>& other, int64_t rows, int64_t head_dim);

}  // namespace meshtrain::kernels
