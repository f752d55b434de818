// MLP activations. All arrays [n] contiguous. Backward OVERWRITES input grads.
// Out is T, or uint16_t for bf16 outputs of f32 inputs (the matmul operands
// of the bf16 policy written directly, rounded as convert_f32_to_bf16 rounds:
// the bits of computing in f32 and converting after).
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

// SwiGLU: out = silu(gate) * up
template <typename T, typename Out> void swiglu_forward(const T* gate, const T* up, int64_t n, Out* out);
template <typename T, typename Out>
void swiglu_backward(const T* gate, const T* up, const T* dout, int64_t n, Out* dgate, Out* dup);

// GELU, tanh approximation (GPT-2's gelu_new).
template <typename T, typename Out> void gelu_forward(const T* x, int64_t n, Out* y);
template <typename T, typename Out> void gelu_backward(const T* x, const T* dy, int64_t n, Out* dx);

// The explicit instantiations for one (T, Out), in the dispatching
// namespace and in each ISA level's (dispatch.cc, per_isa/activation.cc).
#define MT_INSTANTIATE_ACTIVATIONS(T, Out)                                               \
  template void swiglu_forward<T, Out>(const T*, const T*, int64_t, Out*);                  \
  template void swiglu_backward<T, Out>(const T*, const T*, const T*, int64_t, Out*, Out*); \
  template void gelu_forward<T, Out>(const T*, int64_t, Out*);                              \
  template void gelu_backward<T, Out>(const T*, const T*, int64_t, Out*);

}  // namespace meshtrain::kernels
