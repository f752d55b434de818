// The addition of a block tree's subtrees held in cache by a kernel
// (core/subtree_counter.h says which; the packed GEMM's and the attention
// backward's block trees), at the level being compiled: elementwise, so
// the same bits as KernelTable::add on whole tensors.
#pragma once

#include <cstdint>

#include "meshtrain/kernels/cpu/per_isa/isa_target.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

// x += y over n values, on this thread (left += right).
template <typename T>
inline void add_values(T* __restrict x, const T* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
