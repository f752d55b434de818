// Row helpers of the softmax-based kernels (cross_entropy.cc,
// vocab_parallel.cc): one definition per ISA level, so the serial
// cross-entropy and the vocabulary-parallel passes on one rank run the same
// loops to the same bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS::detail {

inline float exp_t(float x) { return fast_exp(x); }
inline double exp_t(double x) { return std::exp(x); }

template <typename T>
T row_max(const T* x, int64_t V) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

}  // namespace meshtrain::kernels::MT_ISA_NS::detail
MT_ISA_END
