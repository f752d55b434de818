// The device seam: every kernel the layers, the optimizer and the parallel
// engine call, over tensors whose dtype selects the arithmetic and whose
// device selects the table. kernels/cpu/ implements it for the host; another
// device adds its own table beside it (register_kernels) without touching a
// layer. Shapes are read from the tensors (2-D [rows, features] unless
// stated); int32 index arrays (token ids, targets, positions, segments) are
// host pointers. Backward kernels ACCUMULATE into parameter gradients where
// the comment says "+=".
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/cross_entropy.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/moe_routing.h"

namespace meshtrain::kernels {

class KernelTable {
 public:
  virtual ~KernelTable() = default;
  virtual Device device() const = 0;

  // ---- dense algebra ----
  // c[M,N] = alpha op(a) op(b) + beta c; op(a) [M,K] (a stored [K,M] when ta), op(b) [K,N] ([N,K] when tb).
  // a, b and c share a dtype, or a and b are bf16/f16 and c is f32 (16-bit
  // inputs, f32 accumulate and output).
  virtual void gemm(bool ta, bool tb, double alpha, const Tensor& a, const Tensor& b, double beta,
                    const Tensor& c) const = 0;
  // c = alpha op(a) op(b) + base (base: c itself or a tensor of c's shape
  // and dtype): the same values as copying base into c and a gemm with beta
  // 1 (a residual added inside the GEMM; a device may read base there).
  virtual void gemm_onto(bool ta, bool tb, double alpha, const Tensor& a, const Tensor& b, const Tensor& base,
                         const Tensor& c) const {
    if (base.raw() != c.raw()) copy(c, base);
    gemm(ta, tb, alpha, a, b, 1.0, c);
  }
  // Products that share b: rows[i].c = alpha op(rows[i].a) op(b) + rows[i].beta rows[i].c,
  // each the same values as one gemm (the weight gradients of the layers
  // that read one input; a device may read b once for all of them).
  struct GemmRows {
    Tensor a;
    double beta = 0.0;
    Tensor c;
  };
  virtual void gemm_shared_b(bool ta, bool tb, double alpha, const std::vector<GemmRows>& rows,
                             const Tensor& b) const {
    for (const GemmRows& r : rows) gemm(ta, tb, alpha, r.a, b, r.beta, r.c);
  }
  // A sum over canonical blocks of k in the tree (docs/math.md (M.73),
  // (M.74)): c (+)= the tree (M.10) over leaves j of
  //   leaf j = sum over terms t, in order, of op(a_t)[:, K_tj] op(b_t)[K_tj, :]
  // K_tj = terms[t].k_blocks[j] (offset, length > 0), each leaf's first
  // product written and the later ones added (beta 1), the leaves added as
  // model/canonical_sum.h's BlockTree adds them and the root added to c
  // where `accumulate`, else written. The bits are those of the separate
  // gemm calls on the blocks' columns and rows and of the tree's additions.
  // False, doing nothing, where this device has no such kernel for these
  // operands: the caller then runs those GEMMs and the tree itself.
  struct BlockTerm {
    Tensor a;
    bool ta = false;
    Tensor b;
    bool tb = false;
    std::vector<std::pair<int64_t, int64_t>> k_blocks;
  };
  virtual bool gemm_block_tree(const std::vector<BlockTerm>& terms, bool accumulate, const Tensor& c) const {
    (void)terms, (void)accumulate, (void)c;
    return false;
  }
  // dst = src in dst's dtype (f32 <-> bf16 / f16 round to nearest even; f64 <-> f32).
  virtual void convert(const Tensor& dst, const Tensor& src) const = 0;
  virtual void add_row_bias(const Tensor& y, const Tensor& bias) const = 0;   // y[i, :] += bias
  virtual void bias_grad(const Tensor& dbias, const Tensor& dy) const = 0;    // dbias += sum_i dy[i, :]
  virtual void add(const Tensor& y, const Tensor& x) const = 0;               // y += x (same numel)
  virtual void copy(const Tensor& dst, const Tensor& src) const = 0;          // same numel and dtype
  // dst [M, w] = src[:, col : col + w] (src [M, K], same dtype).
  virtual void copy_columns(const Tensor& dst, const Tensor& src, int64_t col) const = 0;
  // dst[:, col : col + w] = src [M, w] (dst [M, K], same dtype): copy_columns' inverse.
  virtual void put_columns(const Tensor& dst, const Tensor& src, int64_t col) const = 0;
  virtual void fill(const Tensor& y, double value) const = 0;
  virtual void scale(const Tensor& y, double a) const = 0;                    // y *= a
  // Sum of squares in f64 over canonical blocks (elementwise.h kSumBlock):
  // the same value for any thread count.
  virtual double sum_squares(const Tensor& x) const = 0;
  // out[i] = sum_squares of block i of x (blocks of `block` elements, the
  // last one shorter), the blocks computed in parallel.
  virtual void block_sum_squares(const Tensor& x, int64_t block, double* out) const = 0;
  virtual bool all_finite(const Tensor& x) const = 0;
  // The f64 elements of x's ranges [begin, begin + count), in the order
  // given, added one by one to one f64 accumulator (the global norm's
  // canonical order: parallel/grad_norm.h).
  virtual double sum_in_order(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& ranges) const = 0;

  // ---- layers ----
  // Parameters (table, norm weights, biases) may be bf16/f16 under the mixed
  // policies while activations, statistics and gradients are f32.
  virtual void embedding_forward(const int32_t* ids, const Tensor& table, const Tensor& out) const = 0;
  virtual void embedding_backward(const int32_t* ids, const Tensor& dout, const Tensor& dtable) const = 0;  // +=
  // RMSNorm (mean undefined) or LayerNorm (bias, mean defined): y = norm(x) w (+ b), per row of [n, d];
  // y may be bf16 where x is f32 (as the activations' outputs below).
  virtual void norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd) const = 0;
  // dx += dnorm/dx . dy; dw += ...; db += ... (db undefined for RMSNorm).
  virtual void norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                             const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db) const = 0;
  // x [n, heads * head_dim] rotated in place (inverse: the backward).
  virtual void rope(const Tensor& x, const int32_t* positions, int64_t heads, int64_t head_dim,
                    const RopeTable& table, bool inverse) const = 0;
  // The activations' outputs (out, y, dgate/dup, dx) may be bf16 where the
  // inputs are f32: the bf16 policy's matmul operands written directly, the
  // bits of computing in f32 and converting after (convert).
  virtual void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) const = 0;
  virtual void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate,
                               const Tensor& dup) const = 0;
  virtual void gelu_forward(const Tensor& x, const Tensor& y) const = 0;
  virtual void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const = 0;
  // q/out [n, Hq*D], k/v [n, Hkv*D], lse [B, Hq, T]; backward overwrites dq, dk, dv.
  virtual void attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const int32_t* segments, double scale, const Tensor& out,
                                 const Tensor& lse) const = 0;
  virtual void attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const int32_t* segments, double scale, const Tensor& out, const Tensor& lse,
                                  const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) const = 0;
  // Loss SUM and supervised COUNT over logits [n, V] (targets < 0 are not supervised).
  virtual CrossEntropyResult cross_entropy(const Tensor& logits, const int32_t* targets) const = 0;
  // Also dlogits = grad_scale * d(loss sum)/d(logits) (dlogits may alias logits).
  virtual CrossEntropyResult cross_entropy_backward(const Tensor& logits, const int32_t* targets, double grad_scale,
                                                    const Tensor& dlogits) const = 0;

  // ---- context parallelism (cpu/attention.h): one query span against one K/V span ----
  // The softmax state of rows = B * Hq * span queries: o [rows, D], a and l [rows].
  struct SoftmaxStateRef {
    Tensor o, a, l;
  };
  virtual void softmax_state_init(const SoftmaxStateRef& st) const = 0;  // a = -inf, l = 0, o = 0
  // Folds the keys of span ks into the state of the queries of span qs (q [B, qs.len, Hq, D]).
  virtual void attention_partial_forward(const AttentionShape& s, const Tensor& q, AttentionSpan qs, const Tensor& k,
                                         const Tensor& v, AttentionSpan ks, double scale,
                                         const SoftmaxStateRef& st) const = 0;
  // out [B, qs_len, Hq, D] = o / l, lse [B, Hq, qs_len] = a + log l.
  virtual void softmax_state_finalize(const AttentionShape& s, int64_t qs_len, const SoftmaxStateRef& st,
                                      const Tensor& out, const Tensor& lse) const = 0;
  // dq, dk, dv += the contribution of the keys of span ks, from the final out and lse.
  virtual void attention_partial_backward(const AttentionShape& s, const Tensor& q, AttentionSpan qs, const Tensor& k,
                                          const Tensor& v, AttentionSpan ks, double scale, const Tensor& out,
                                          const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                          const Tensor& dv) const = 0;
  // Reproducible mode's chunk pairs (cpu/attention.h,
  // attention_chunk_tree_backward; docs/math.md (M.74)): each chunk's dq +=
  // its contribution, and dk, dv = the tree over leaves of each leaf's
  // chunks' contributions (leaves: runs of chunks numbered from 0), in
  // position order over the key spans' rows.
  struct AttentionChunkRef {
    Tensor q;
    AttentionSpan qs, ks;
    Tensor out, lse, dout, dq;
    int leaf = 0;
  };
  virtual void attention_chunk_tree_backward(const AttentionShape& s, const std::vector<AttentionChunkRef>& chunks,
                                             const Tensor& k, const Tensor& v, double scale, const Tensor& dk,
                                             const Tensor& dv) const = 0;

  // ---- tensor parallelism (cpu/vocab_parallel.h) ----
  // This rank's vocabulary rows [vocab_begin, vocab_begin + table rows) of
  // vocab_size: out[i] = table[ids[i] - vocab_begin], a zero row for an id
  // outside the slice (DataError outside [0, vocab_size)).
  virtual void embedding_slice_forward(const int32_t* ids, const Tensor& table, int64_t vocab_begin,
                                       int64_t vocab_size, const Tensor& out) const = 0;
  // dtable[ids[i] - vocab_begin] += dout[i] for ids in the slice.
  virtual void embedding_slice_backward(const int32_t* ids, const Tensor& dout, int64_t vocab_begin,
                                        const Tensor& dtable) const = 0;
  // Vocabulary-parallel cross-entropy over local logits [n, Vl] in three
  // passes around the caller's reductions: row max [n]; then sum_exp and
  // target_logit [n] (exps, may alias the logits, undefined in forward-only
  // use) over the local columns [col_begin, col_end) (col_end -1: all; a
  // canonical block of reproducible mode, model/canonical_sum.h); then the
  // loss SUM and COUNT (and dlogits from the exps).
  virtual void vocab_ce_max(const Tensor& logits, const int32_t* targets, int64_t vocab_size,
                            const Tensor& row_max) const = 0;
  virtual void vocab_ce_sums(const Tensor& logits, const int32_t* targets, int64_t vocab_begin, const Tensor& row_max,
                             const Tensor& sum_exp, const Tensor& target_logit, const Tensor& exps,
                             int64_t col_begin = 0, int64_t col_end = -1) const = 0;
  virtual CrossEntropyResult vocab_ce_finish(const int32_t* targets, int64_t vocab_begin, const Tensor& row_max,
                                             const Tensor& sum_exp, const Tensor& target_logit, double grad_scale,
                                             const Tensor& dlogits) const = 0;

  // ---- mixture of experts ----
  // The routing decisions of router logits [n, E] (f32 or f64; moe_routing.h:
  // index logic on the host over the logits' values).
  virtual MoeRouting route(const MoeRoutingConfig& cfg, const Tensor& logits) const = 0;
  // dlogits [n, E] = router_logit_grads(r, cfg, dgate, aux_scale) (moe_routing.h).
  virtual void router_backward(const MoeRouting& r, const MoeRoutingConfig& cfg, const double* dgate,
                               double aux_scale, const Tensor& dlogits) const = 0;
  // Index lists walked in order (cpu/moe_rows.h):
  // dst[i, :] = src[rows[i], :] for i < count (any dtype, dst has >= count rows).
  virtual void gather_rows(const Tensor& src, const int32_t* rows, int64_t count, const Tensor& dst) const = 0;
  // dst[dst_rows[i], :] += w[i] * src[src_rows[i], :] for i = 0..count-1 in order (w null: 1).
  virtual void add_rows(const Tensor& dst, const int32_t* dst_rows, const Tensor& src, const int32_t* src_rows,
                        const double* w, int64_t count) const = 0;
  // out[i] = a[a_rows[i], :] . b[b_rows[i], :] (summed in double).
  virtual void dot_rows(const Tensor& a, const int32_t* a_rows, const Tensor& b, const int32_t* b_rows, double* out,
                        int64_t count) const = 0;

  // ---- optimizer ----
  // One AdamW update of `param` from grad * grad_scale; m, v in the optimizer
  // dtype. compute_copy, where defined (param's numel, a 16-bit dtype): also
  // the updated param converted into it (the bits of convert after; the f32
  // master's compute copy under the mixed policies).
  virtual void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const AdamWHyper& h, double grad_scale, const Tensor& compute_copy) const = 0;
};

// The table of a device; ConfigError when this build has none for it.
const KernelTable& kernels_for(Device device);
inline const KernelTable& kernels_for(const Tensor& t) { return kernels_for(t.device()); }
// A device backend installs its table (the host's and the meta device's are
// built in); returns the table it replaces (a test may wrap the host's).
const KernelTable* register_kernels(Device device, const KernelTable* table);

}  // namespace meshtrain::kernels
