// The kernels compiled once per ISA level: the public signatures of
// kernels/cpu/*.h, declared in namespaces scalar, avx2 and avx512. Each
// per_isa/*.cc defines its level's copy (float everywhere, double at the
// scalar level); dispatch.cc calls the active level's.
#pragma once

#include <cstdint>

#include "meshtrain/kernels/cpu/activation.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/cross_entropy.h"
#include "meshtrain/kernels/cpu/packed_gemm.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/cpu/vocab_parallel.h"

#define MT_DECLARE_PER_ISA_KERNELS(ns)                                                                           \
  namespace meshtrain::kernels::ns {                                                                             \
  template <typename T, typename Out> void swiglu_forward(const T*, const T*, int64_t, Out*);                    \
  template <typename T, typename Out> void swiglu_backward(const T*, const T*, const T*, int64_t, Out*, Out*);   \
  template <typename T, typename Out> void gelu_forward(const T*, int64_t, Out*);                                \
  template <typename T, typename Out> void gelu_backward(const T*, const T*, int64_t, Out*);                     \
  template <typename T>                                                                                          \
  void adamw_step(T*, const T*, T*, T*, int64_t, const AdamWHyper&, T, uint16_t*);                              \
  template <typename T, typename In>                                                                            \
  void attention_forward(const AttentionShape&, const In*, const In*, const In*, const int32_t*, T, In*, T*);    \
  template <typename T, typename In>                                                                            \
  void attention_backward(const AttentionShape&, const In*, const In*, const In*, const int32_t*, T, const In*,  \
                          const T*, const T*, T*, T*, T*);                                                       \
  template <typename T> void softmax_state_merge(SoftmaxState<T>, const SoftmaxState<T>&, int64_t, int64_t);     \
  template <typename T> void softmax_state_init(SoftmaxState<T>, int64_t, int64_t);                              \
  template <typename T>                                                                                          \
  void attention_partial_forward(const AttentionShape&, const T*, AttentionSpan, const T*, const T*,             \
                                 AttentionSpan, T, SoftmaxState<T>);                                             \
  template <typename T>                                                                                          \
  void softmax_state_finalize(const AttentionShape&, int64_t, const SoftmaxState<T>&, T*, T*);                   \
  template <typename T>                                                                                          \
  void attention_partial_backward(const AttentionShape&, const T*, AttentionSpan, const T*, const T*,            \
                                  AttentionSpan, T, const T*, const T*, const T*, T*, T*, T*);                   \
  template <typename T>                                                                                          \
  void attention_chunk_tree_backward(const AttentionShape&, const AttentionChunk<T>*, int, const T*, const T*, T, \
                                     T*, T*);                                                                    \
  template <typename T> CrossEntropyResult cross_entropy_forward(const T*, const int32_t*, int64_t, int64_t);    \
  template <typename T>                                                                                          \
  CrossEntropyResult cross_entropy_forward_backward(const T*, const int32_t*, int64_t, int64_t, T, T*);          \
  template <typename T> void add_inplace(T*, const T*, int64_t);                                                 \
  template <typename T> void scale_inplace(T*, T, int64_t);                                                      \
  template <typename T> void axpy(T*, T, const T*, int64_t);                                                     \
  template <typename T> void fill(T*, T, int64_t);                                                               \
  template <typename T> double sum_squares(const T*, int64_t);                                                   \
  template <typename T> bool all_finite(const T*, int64_t);                                                      \
  void convert_f32_to_bf16(const float*, uint16_t*, int64_t);                                                    \
  void convert_bf16_to_f32(const uint16_t*, float*, int64_t);                                                    \
  template <typename T> void embedding_forward(const int32_t*, int64_t, const T*, int64_t, int64_t, T*);         \
  template <typename T> void embedding_backward(const int32_t*, int64_t, const T*, int64_t, int64_t, T*);        \
  template <typename T, typename Out> void rmsnorm_forward(const T*, const T*, int64_t, int64_t, T, Out*, T*);   \
  template <typename T>                                                                                          \
  void rmsnorm_backward(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*);                       \
  template <typename T, typename Out>                                                                                          \
  void layernorm_forward(const T*, const T*, const T*, int64_t, int64_t, T, Out*, T*, T*);                         \
  template <typename T>                                                                                          \
  void layernorm_backward(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*, T*);       \
  template <typename T>                                                                                          \
  void rope_apply(T*, const int32_t*, int64_t, int64_t, int64_t, const RopeTable&, bool);                        \
  template <typename T>                                                                                          \
  void embedding_slice_forward(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, int64_t, T*);       \
  template <typename T>                                                                                          \
  void embedding_slice_backward(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, T*);               \
  template <typename T> void vocab_ce_max(const T*, const int32_t*, int64_t, int64_t, int64_t, T*);              \
  template <typename T>                                                                                          \
  void vocab_ce_sums(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, const T*, T*, T*, T*);        \
  template <typename T>                                                                                          \
  CrossEntropyResult vocab_ce_finish(const int32_t*, int64_t, int64_t, int64_t, const T*, const T*, const T*, T, \
                                     T*);                                                                        \
  void packed_gemm_f32_rows(bool, bool, const PackedGemmRows*, int, int64_t, int64_t, float, const float*);       \
  PackedGemmBlocking packed_gemm_blocking();                                                                     \
  void packed_gemm_f32_tree(const PackedGemmTreeTerm*, int, int, int64_t, int64_t, bool, float*);               \
  }

MT_DECLARE_PER_ISA_KERNELS(scalar)
MT_DECLARE_PER_ISA_KERNELS(avx2)
MT_DECLARE_PER_ISA_KERNELS(avx512)
#undef MT_DECLARE_PER_ISA_KERNELS

// The bf16 packed GEMM exists at the AVX-512 level only (its tile needs
// AVX-512 BF16 on top: packed_gemm_bf16_available() says whether to call it).
namespace meshtrain::kernels::avx512 {
void packed_gemm_bf16_rows(bool, bool, const PackedGemmRowsBf16*, int, int64_t, int64_t, float, const bf16*);
PackedGemmBlocking packed_gemm_bf16_blocking();
}  // namespace meshtrain::kernels::avx512
