// MLP activations. All arrays [n] contiguous. Backward OVERWRITES input grads.
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

// SwiGLU: out = silu(gate) * up
template <typename T> void swiglu_forward(const T* gate, const T* up, int64_t n, T* out);
template <typename T>
void swiglu_backward(const T* gate, const T* up, const T* dout, int64_t n, T* dgate, T* dup);

// GELU, tanh approximation (GPT-2's gelu_new).
template <typename T> void gelu_forward(const T* x, int64_t n, T* y);
template <typename T> void gelu_backward(const T* x, const T* dy, int64_t n, T* dx);

}  // namespace meshtrain::kernels
