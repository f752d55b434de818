// Cross-entropy over logits [n, V] with targets [n] (int32; a target < 0 is
// not supervised: the label mask). Returns the loss SUM and the supervised
// COUNT, never a mean: normalization by the global N happens in the trainer
// (docs/math.md (M.4)).
#pragma once

#include <cstdint>

namespace meshtrain::kernels {

struct CrossEntropyResult {
  double loss_sum = 0;
  int64_t count = 0;
};

template <typename T>
CrossEntropyResult cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t V);

// Fused: loss and dlogits = grad_scale * (softmax - onehot) in one pass over
// each row; unsupervised rows get zero gradient. dlogits may alias logits
// (OVERWRITES). grad_scale is the loss coefficient (1/N, docs/math.md (M.5)-(M.6)).
template <typename T>
CrossEntropyResult cross_entropy_forward_backward(const T* logits, const int32_t* targets, int64_t n, int64_t V,
                                                  T grad_scale, T* dlogits);

}  // namespace meshtrain::kernels
