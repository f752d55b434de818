// The public kernel entry points (kernels/cpu/*.h): each forwards to the copy
// of the kernel compiled for the active ISA level (isa.h, per_isa/). float
// runs at the active level; double, the gradient-check reference, always
// runs the scalar level.
#include <type_traits>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/activation.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/cross_entropy.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/embedding.h"
#include "meshtrain/kernels/cpu/isa.h"
#include "meshtrain/kernels/cpu/norm.h"
#include "meshtrain/kernels/cpu/packed_gemm.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/cpu/vocab_parallel.h"

// Calls fn<T>(args...) of the active level (T is the enclosing template's).
#define MT_DISPATCH(fn, ...)                                         \
  do {                                                               \
    if constexpr (!std::is_same_v<T, float>) {                       \
      return scalar::fn<T>(__VA_ARGS__);                             \
    } else {                                                         \
      switch (active_isa()) {                                        \
        case Isa::kAvx512: return avx512::fn<T>(__VA_ARGS__);        \
        case Isa::kAvx2: return avx2::fn<T>(__VA_ARGS__);            \
        case Isa::kScalar: break;                                    \
      }                                                              \
      return scalar::fn<T>(__VA_ARGS__);                             \
    }                                                                \
  } while (0)

// Calls fn(args...) of the active level (functions that are not templates).
#define MT_DISPATCH_LEVEL(fn, ...)                        \
  do {                                                    \
    switch (active_isa()) {                               \
      case Isa::kAvx512: return avx512::fn(__VA_ARGS__);  \
      case Isa::kAvx2: return avx2::fn(__VA_ARGS__);      \
      case Isa::kScalar: break;                           \
    }                                                     \
    return scalar::fn(__VA_ARGS__);                       \
  } while (0)

namespace meshtrain::kernels {

// ---- activation.h
template <typename T, typename Out>
void swiglu_forward(const T* gate, const T* up, int64_t n, Out* out) {
  MT_DISPATCH(swiglu_forward, gate, up, n, out);
}
template <typename T, typename Out>
void swiglu_backward(const T* gate, const T* up, const T* dout, int64_t n, Out* dgate, Out* dup) {
  MT_DISPATCH(swiglu_backward, gate, up, dout, n, dgate, dup);
}
template <typename T, typename Out>
void gelu_forward(const T* x, int64_t n, Out* y) {
  MT_DISPATCH(gelu_forward, x, n, y);
}
template <typename T, typename Out>
void gelu_backward(const T* x, const T* dy, int64_t n, Out* dx) {
  MT_DISPATCH(gelu_backward, x, dy, n, dx);
}

// ---- adamw.h
template <typename T>
void adamw_step(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWHyper& h, T grad_scale,
                uint16_t* param_bf16) {
  MT_DISPATCH(adamw_step, param, grad, m, v, n, h, grad_scale, param_bf16);
}

// ---- attention.h
template <typename T, typename In>
void attention_forward(const AttentionShape& s, const In* q, const In* k, const In* v, const int32_t* seg, T scale,
                       In* out, T* lse) {
  MT_DISPATCH(attention_forward, s, q, k, v, seg, scale, out, lse);
}
template <typename T, typename In>
void attention_backward(const AttentionShape& s, const In* q, const In* k, const In* v, const int32_t* seg, T scale,
                        const In* out, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  MT_DISPATCH(attention_backward, s, q, k, v, seg, scale, out, lse, dout, dq, dk, dv);
}
template <typename T>
void softmax_state_merge(SoftmaxState<T> into, const SoftmaxState<T>& other, int64_t rows, int64_t head_dim) {
  MT_DISPATCH(softmax_state_merge, into, other, rows, head_dim);
}
template <typename T>
void softmax_state_init(SoftmaxState<T> st, int64_t rows, int64_t head_dim) {
  MT_DISPATCH(softmax_state_init, st, rows, head_dim);
}
template <typename T>
void attention_partial_forward(const AttentionShape& s, const T* q, AttentionSpan qs, const T* k, const T* v,
                               AttentionSpan ks, T scale, SoftmaxState<T> state) {
  MT_DISPATCH(attention_partial_forward, s, q, qs, k, v, ks, scale, state);
}
template <typename T>
void softmax_state_finalize(const AttentionShape& s, int64_t qs_len, const SoftmaxState<T>& st, T* out, T* lse) {
  MT_DISPATCH(softmax_state_finalize, s, qs_len, st, out, lse);
}
template <typename T>
void attention_partial_backward(const AttentionShape& s, const T* q, AttentionSpan qs, const T* k, const T* v,
                                AttentionSpan ks, T scale, const T* out, const T* lse, const T* dout, T* dq, T* dk,
                                T* dv) {
  MT_DISPATCH(attention_partial_backward, s, q, qs, k, v, ks, scale, out, lse, dout, dq, dk, dv);
}
template <typename T>
void attention_chunk_tree_backward(const AttentionShape& s, const AttentionChunk<T>* chunks, int count, const T* k,
                                   const T* v, T scale, T* dk, T* dv) {
  MT_DISPATCH(attention_chunk_tree_backward, s, chunks, count, k, v, scale, dk, dv);
}

// ---- cross_entropy.h
template <typename T>
CrossEntropyResult cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t V) {
  MT_DISPATCH(cross_entropy_forward, logits, targets, n, V);
}
template <typename T>
CrossEntropyResult cross_entropy_forward_backward(const T* logits, const int32_t* targets, int64_t n, int64_t V,
                                                  T grad_scale, T* dlogits) {
  MT_DISPATCH(cross_entropy_forward_backward, logits, targets, n, V, grad_scale, dlogits);
}

// ---- elementwise.h
template <typename T>
void add_inplace(T* y, const T* x, int64_t n) {
  MT_DISPATCH(add_inplace, y, x, n);
}
template <typename T>
void scale_inplace(T* y, T a, int64_t n) {
  MT_DISPATCH(scale_inplace, y, a, n);
}
template <typename T>
void axpy(T* y, T a, const T* x, int64_t n) {
  MT_DISPATCH(axpy, y, a, x, n);
}
template <typename T>
void fill(T* y, T value, int64_t n) {
  MT_DISPATCH(fill, y, value, n);
}
template <typename T>
double sum_squares(const T* x, int64_t n) {
  MT_DISPATCH(sum_squares, x, n);
}
// Not an ISA kernel: the dispatched sum_squares per block, blocks over the
// team (each block's sum runs on one thread, as it would called alone).
template <typename T>
void block_sum_squares(const T* x, int64_t n, int64_t block, double* out) {
  const int64_t blocks = (n + block - 1) / block;
  parallel_range(blocks, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = sum_squares(x + i * block, std::min(block, n - i * block));
  });
}
template <typename T>
bool all_finite(const T* x, int64_t n) {
  MT_DISPATCH(all_finite, x, n);
}
void convert_f32_to_bf16(const float* x, uint16_t* y, int64_t n) { MT_DISPATCH_LEVEL(convert_f32_to_bf16, x, y, n); }
void convert_bf16_to_f32(const uint16_t* x, float* y, int64_t n) { MT_DISPATCH_LEVEL(convert_bf16_to_f32, x, y, n); }

// ---- packed_gemm.h
void packed_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     const float* B, float beta, float* C) {
  const PackedGemmRows rows{M, A, beta, C};
  packed_gemm_f32_rows(trans_a, trans_b, &rows, 1, N, K, alpha, B);
}

void packed_gemm_f32_rows(bool trans_a, bool trans_b, const PackedGemmRows* rows, int count, int64_t N, int64_t K,
                          float alpha, const float* B) {
  MT_DISPATCH_LEVEL(packed_gemm_f32_rows, trans_a, trans_b, rows, count, N, K, alpha, B);
}
PackedGemmBlocking packed_gemm_blocking() { MT_DISPATCH_LEVEL(packed_gemm_blocking); }
void packed_gemm_f32_tree(const PackedGemmTreeTerm* terms, int count, int leaves, int64_t M, int64_t N,
                          bool accumulate, float* C) {
  MT_DISPATCH_LEVEL(packed_gemm_f32_tree, terms, count, leaves, M, N, accumulate, C);
}

bool packed_gemm_bf16_available() {
  static const bool cpu = __builtin_cpu_supports("avx512bf16");
  return cpu && active_isa() == Isa::kAvx512;
}

void packed_gemm_bf16_rows(bool trans_a, bool trans_b, const PackedGemmRowsBf16* rows, int count, int64_t N, int64_t K,
                           float alpha, const bf16* B) {
  MT_CHECK(packed_gemm_bf16_available(), "the packed bf16 GEMM needs AVX-512 BF16 at the avx512 level (",
           isa_description(), ")");
  avx512::packed_gemm_bf16_rows(trans_a, trans_b, rows, count, N, K, alpha, B);
}

PackedGemmBlocking packed_gemm_bf16_blocking() { return avx512::packed_gemm_bf16_blocking(); }

// ---- embedding.h
template <typename T>
void embedding_forward(const int32_t* ids, int64_t n, const T* table, int64_t vocab, int64_t dim, T* out) {
  MT_DISPATCH(embedding_forward, ids, n, table, vocab, dim, out);
}
template <typename T>
void embedding_backward(const int32_t* ids, int64_t n, const T* dout, int64_t vocab, int64_t dim, T* dtable) {
  MT_DISPATCH(embedding_backward, ids, n, dout, vocab, dim, dtable);
}

// ---- norm.h
template <typename T, typename Out>
void rmsnorm_forward(const T* x, const T* w, int64_t n, int64_t d, T eps, Out* y, T* rstd) {
  MT_DISPATCH(rmsnorm_forward, x, w, n, d, eps, y, rstd);
}
template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t d, T* dx, T* dw) {
  MT_DISPATCH(rmsnorm_backward, x, w, rstd, dy, n, d, dx, dw);
}
template <typename T, typename Out>
void layernorm_forward(const T* x, const T* w, const T* b, int64_t n, int64_t d, T eps, Out* y, T* mean, T* rstd) {
  MT_DISPATCH(layernorm_forward, x, w, b, n, d, eps, y, mean, rstd);
}
template <typename T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n, int64_t d,
                        T* dx, T* dw, T* db) {
  MT_DISPATCH(layernorm_backward, x, w, mean, rstd, dy, n, d, dx, dw, db);
}

// ---- rope.h
template <typename T>
void rope_apply(T* x, const int32_t* pos, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& table,
                bool inverse) {
  MT_DISPATCH(rope_apply, x, pos, n, heads, head_dim, table, inverse);
}

// ---- vocab_parallel.h
template <typename T>
void embedding_slice_forward(const int32_t* ids, int64_t n, const T* table, int64_t vocab_begin, int64_t Vl,
                             int64_t V, int64_t dim, T* out) {
  MT_DISPATCH(embedding_slice_forward, ids, n, table, vocab_begin, Vl, V, dim, out);
}
template <typename T>
void embedding_slice_backward(const int32_t* ids, int64_t n, const T* dout, int64_t vocab_begin, int64_t Vl,
                              int64_t dim, T* dtable) {
  MT_DISPATCH(embedding_slice_backward, ids, n, dout, vocab_begin, Vl, dim, dtable);
}
template <typename T>
void vocab_ce_max(const T* logits, const int32_t* targets, int64_t n, int64_t Vl, int64_t V, T* row_max) {
  MT_DISPATCH(vocab_ce_max, logits, targets, n, Vl, V, row_max);
}
template <typename T>
void vocab_ce_sums(const T* logits, const int32_t* targets, int64_t n, int64_t Vl, int64_t ld, int64_t vocab_begin,
                   const T* row_max, T* sum_exp, T* target_logit, T* exps) {
  MT_DISPATCH(vocab_ce_sums, logits, targets, n, Vl, ld, vocab_begin, row_max, sum_exp, target_logit, exps);
}
template <typename T>
CrossEntropyResult vocab_ce_finish(const int32_t* targets, int64_t n, int64_t Vl, int64_t vocab_begin,
                                   const T* row_max, const T* sum_exp, const T* target_logit, T grad_scale,
                                   T* dlogits) {
  MT_DISPATCH(vocab_ce_finish, targets, n, Vl, vocab_begin, row_max, sum_exp, target_logit, grad_scale, dlogits);
}

MT_INSTANTIATE_ACTIVATIONS(float, uint16_t)
MT_INSTANTIATE_ATTENTION(float, uint16_t)
template void rmsnorm_forward<float, uint16_t>(const float*, const float*, int64_t, int64_t, float, uint16_t*, float*);
template void layernorm_forward<float, uint16_t>(const float*, const float*, const float*, int64_t, int64_t, float,
                                                 uint16_t*, float*, float*);
#define MT_INSTANTIATE(T)                                                                                          \
  MT_INSTANTIATE_ACTIVATIONS(T, T)                                                                                 \
  template void adamw_step<T>(T*, const T*, T*, T*, int64_t, const AdamWHyper&, T, uint16_t*);                     \
  MT_INSTANTIATE_ATTENTION(T, T)                                                                                   \
  template void softmax_state_merge<T>(SoftmaxState<T>, const SoftmaxState<T>&, int64_t, int64_t);                 \
  template void softmax_state_init<T>(SoftmaxState<T>, int64_t, int64_t);                                          \
  template void softmax_state_finalize<T>(const AttentionShape&, int64_t, const SoftmaxState<T>&, T*, T*);         \
  template void attention_partial_forward<T>(const AttentionShape&, const T*, AttentionSpan, const T*, const T*,   \
                                             AttentionSpan, T, SoftmaxState<T>);                                   \
  template void attention_partial_backward<T>(const AttentionShape&, const T*, AttentionSpan, const T*, const T*,  \
                                              AttentionSpan, T, const T*, const T*, const T*, T*, T*, T*);         \
  template void attention_chunk_tree_backward<T>(const AttentionShape&, const AttentionChunk<T>*, int, const T*,  \
                                                 const T*, T, T*, T*);                                             \
  template CrossEntropyResult cross_entropy_forward<T>(const T*, const int32_t*, int64_t, int64_t);               \
  template CrossEntropyResult cross_entropy_forward_backward<T>(const T*, const int32_t*, int64_t, int64_t, T,    \
                                                                T*);                                               \
  template void add_inplace<T>(T*, const T*, int64_t);                                                             \
  template void scale_inplace<T>(T*, T, int64_t);                                                                  \
  template void axpy<T>(T*, T, const T*, int64_t);                                                                 \
  template void fill<T>(T*, T, int64_t);                                                                           \
  template double sum_squares<T>(const T*, int64_t);                                                               \
  template void block_sum_squares<T>(const T*, int64_t, int64_t, double*);                                        \
  template bool all_finite<T>(const T*, int64_t);                                                                  \
  template void embedding_forward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, T*);                     \
  template void embedding_backward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, T*);                    \
  template void rmsnorm_forward<T, T>(const T*, const T*, int64_t, int64_t, T, T*, T*);                            \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*);             \
  template void layernorm_forward<T, T>(const T*, const T*, const T*, int64_t, int64_t, T, T*, T*, T*);            \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*,  \
                                      T*);                                                                         \
  template void rope_apply<T>(T*, const int32_t*, int64_t, int64_t, int64_t, const RopeTable&, bool);           \
  template void embedding_slice_forward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, int64_t, \
                                           T*);                                                                   \
  template void embedding_slice_backward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, T*);   \
  template void vocab_ce_max<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, T*);                         \
  template void vocab_ce_sums<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, const T*, T*, T*,  \
                                 T*);                                                                            \
  template CrossEntropyResult vocab_ce_finish<T>(const int32_t*, int64_t, int64_t, int64_t, const T*, const T*,   \
                                                 const T*, T, T*);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels
