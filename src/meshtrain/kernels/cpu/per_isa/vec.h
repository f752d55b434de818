// fp32 vectors of the level being compiled (GCC vector extensions, so one
// source serves AVX2 and AVX-512): loads, stores and masked tails. Used by
// the register-blocked attention tiles; the other kernels vectorize plain
// `#pragma omp simd` loops. Not available at the scalar level.
#pragma once

#include <cstdint>

#include "meshtrain/kernels/cpu/per_isa/isa_target.h"

#if MT_KERNEL_ISA != MT_ISA_SCALAR
#define MT_HAVE_VECF 1

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

#if MT_KERNEL_ISA == MT_ISA_AVX512
inline constexpr int kLanes = 16;
// 4 x 4 accumulators + 4 B vectors + 1 broadcast of 32 zmm registers.
inline constexpr int kMicroRows = 4, kMicroVecs = 4;
#else
inline constexpr int kLanes = 8;
// 6 x 2 accumulators + 2 B vectors + 1 broadcast of 16 ymm registers.
inline constexpr int kMicroRows = 6, kMicroVecs = 2;
#endif

typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));
typedef float VecFUnaligned __attribute__((vector_size(kLanes * sizeof(float)), aligned(alignof(float))));

inline VecF load(const float* p) { return *reinterpret_cast<const VecFUnaligned*>(p); }
inline void store(float* p, VecF v) { *reinterpret_cast<VecFUnaligned*>(p) = v; }
inline VecF broadcast(float x) { return VecF{} + x; }

// The first n lanes (1 <= n <= kLanes); masked loads read nothing beyond them.
#if MT_KERNEL_ISA == MT_ISA_AVX512
struct Tail {
  __mmask16 k;
};
inline Tail tail_of(int n) { return {__mmask16(n >= 16 ? 0xffffu : (1u << n) - 1u)}; }
inline VecF load(const float* p, Tail t) { return _mm512_maskz_loadu_ps(t.k, p); }
inline void store(float* p, VecF v, Tail t) { _mm512_mask_storeu_ps(p, t.k, v); }
#else
struct Tail {
  __m256i k;
};
inline Tail tail_of(int n) { return {_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))}; }
inline VecF load(const float* p, Tail t) { return _mm256_maskload_ps(p, t.k); }
inline void store(float* p, VecF v, Tail t) { _mm256_maskstore_ps(p, t.k, v); }
#endif

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END

#endif
