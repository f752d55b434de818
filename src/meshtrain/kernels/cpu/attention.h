// Causal self-attention, blockwise with online softmax (flash-style), GQA
// and packed documents. Layouts (row-major):
//   q, out, dq   [B, T, Hq, D]
//   k, v, dk, dv [B, T, Hkv, D]      Hq % Hkv == 0; query head h uses kv head h / (Hq/Hkv)
//   seg          [B, T] int32 document ids, or nullptr (one document per row):
//                query i attends key j iff j <= i and seg[i] == seg[j]
//   lse          [B, Hq, T] log-sum-exp of each row's scaled scores (max + log sum),
//                the per-row softmax state context parallelism merges (docs/math.md (M.49)).
// Backward OVERWRITES dq, dk, dv.
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

struct AttentionShape {
  int64_t batch = 1, seq = 1, q_heads = 1, kv_heads = 1, head_dim = 1;
  // The partial backward's dk and dv per query head ([.., q_heads, D]: each
  // query head's part of its KV head's gradient, apart; reproducible mode's
  // grouped-query attention, docs/math.md (M.76)) instead of per KV head.
  bool kv_grads_per_query = false;
};

// In is T, or uint16_t under the bf16 policy: q, k, v and out are bf16 bits
// (the inputs widened exactly to f32 as the tiles are packed, out rounded
// once as it is written, docs/math.md (M.80)); lse, dout and the gradients
// stay T.
template <typename T, typename In>
void attention_forward(const AttentionShape& s, const In* q, const In* k, const In* v, const int32_t* seg, T scale,
                       In* out, T* lse);

template <typename T, typename In>
void attention_backward(const AttentionShape& s, const In* q, const In* k, const In* v, const int32_t* seg, T scale,
                        const In* out, const T* lse, const T* dout, T* dq, T* dk, T* dv);

// Explicit instantiations of the two above, for one (T, In) (the dispatch
// and every ISA level's copy).
#define MT_INSTANTIATE_ATTENTION(T, In)                                                                      \
  template void attention_forward<T, In>(const AttentionShape&, const In*, const In*, const In*,            \
                                         const int32_t*, T, In*, T*);                                       \
  template void attention_backward<T, In>(const AttentionShape&, const In*, const In*, const In*,           \
                                          const int32_t*, T, const In*, const T*, const T*, T*, T*, T*);

// Partial softmax state of one query block against one key block, and the
// merge of two states (M.49): a = max(a1, a2),
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

// Building blocks for context parallelism (docs/math.md, "Context parallelism"). A
// span is a contiguous shard of a sequence: `len` positions starting at global
// position `pos0`, with document ids seg [B, len] (nullptr = one document; q and k
// spans must both have ids or both not). Masking uses global positions, so a query
// shard and a K/V block from another rank mask exactly as in the full sequence.
struct AttentionSpan {
  int64_t len = 0;
  int64_t pos0 = 0;
  const int32_t* seg = nullptr;
  // A key span's rows: positions from one row's start in k, v (dk, dv) and
  // seg to the next's (0: len, rows back to back); the first len of each
  // row are the span. Query spans are always back to back.
  int64_t row_stride = 0;
};

// Partial state layout: o [B, Hq, qs.len, D], a and l [B, Hq, qs.len], i.e.
// rows = B * Hq * qs.len in (b, h, t) order. s.seq is ignored by the span
// functions; q [B, qs.len, Hq, D], k and v [B, ks.len, Hkv, D].
template <typename T>
void softmax_state_init(SoftmaxState<T> st, int64_t rows, int64_t head_dim);  // a = -inf, l = 0, o = 0

// Folds the keys of span ks into the state of the queries of span qs (online
// softmax, in place). Folding K/V blocks one after another equals merging
// their separate states with softmax_state_merge (up to rounding); key tiles
// with no legal (query, key) pair are skipped. attention_forward runs the
// same per-tile code with the state kept in per-thread scratch.
template <typename T>
void attention_partial_forward(const AttentionShape& s, const T* q, AttentionSpan qs, const T* k, const T* v,
                               AttentionSpan ks, T scale, SoftmaxState<T> state);

// out [B, qs_len, Hq, D] = o / l and lse [B, Hq, qs_len] = a + log(l); a row
// with no legal key gives out = 0 and lse = -inf.
template <typename T>
void softmax_state_finalize(const AttentionShape& s, int64_t qs_len, const SoftmaxState<T>& st, T* out, T* lse);

// Gradient contribution of the keys of span ks, given the FINAL out and lse
// of the queries of span qs (over all their keys). ACCUMULATES into
// dq [B, qs.len, Hq, D] and dk, dv [B, ks.len, Hkv, D]; summing over K/V
// blocks gives the full gradients. attention_backward = zero + this call.
template <typename T>
void attention_partial_backward(const AttentionShape& s, const T* q, AttentionSpan qs, const T* k, const T* v,
                                AttentionSpan ks, T scale, const T* out, const T* lse, const T* dout, T* dq, T* dk,
                                T* dv);

// One query chunk of attention_chunk_tree_backward (and, alone, of
// attention_partial_backward): its queries (span qs), their key span ks in
// the shared k and v, its out, lse, dout and dq, its own dk, dv where it
// adds to them, and its leaf of the tree.
template <typename T, typename In = T>
struct AttentionChunk {
  const In* q;
  AttentionSpan qs, ks;
  const In* out;
  const T* lse;
  const T* dout;
  T* dq;
  T* dk;
  T* dv;
  int leaf;
};
// Reproducible mode's chunk pairs (docs/math.md (M.74)): dq of each chunk
// += its contribution, and
//   dk, dv = the tree (M.10) over leaves l of
//            leaf l = 0 + the contributions of the chunks of leaf l, in order
// (leaves: runs of chunks numbered from 0; the chunks' own dk, dv unused),
// written over [B, key rows, heads, D] in position order (key rows: the
// key spans' row stride, or their length; heads: Hq where
// kv_grads_per_query, else Hkv). The bits of attention_partial_backward
// for each chunk in order into a zeroed buffer per leaf, and the buffers
// added as model/canonical_sum.h's BlockTree adds them; here each key
// tile's leaves live in the thread's cache and each key tile's operands
// are packed once for all chunks. Key spans differ in length only.
template <typename T>
void attention_chunk_tree_backward(const AttentionShape& s, const AttentionChunk<T>* chunks, int count, const T* k,
                                   const T* v, T scale, T* dk, T* dv);

}  // namespace meshtrain::kernels
