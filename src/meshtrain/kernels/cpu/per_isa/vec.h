// fp32 vectors of the level being compiled (GCC vector extensions, so one
// source serves AVX2 and AVX-512): loads, stores, masked tails, FMA and a
// register transpose. Used by the register-blocked attention tiles and the
// packed GEMM; the other kernels vectorize plain `#pragma omp simd` loops.
// Not available at the scalar level.
#pragma once

#include <cstdint>

#include "meshtrain/kernels/cpu/per_isa/isa_target.h"

#if MT_KERNEL_ISA != MT_ISA_SCALAR
#define MT_HAVE_VECF 1

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

#if MT_KERNEL_ISA == MT_ISA_AVX512
inline constexpr int kLanes = 16;
// 6 x 4 accumulators + 4 B vectors + 1 broadcast: 29 of 32 zmm registers
// (4 x 4 left the load ports busier: 8 loads per 16 FMAs, not 10 per 24).
inline constexpr int kMicroRows = 6, kMicroVecs = 4;
#else
inline constexpr int kLanes = 8;
// 6 x 2 accumulators + 2 B vectors + 1 broadcast of 16 ymm registers.
inline constexpr int kMicroRows = 6, kMicroVecs = 2;
#endif

typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));
typedef float VecFUnaligned __attribute__((vector_size(kLanes * sizeof(float)), aligned(alignof(float))));

inline VecF load(const float* p) { return *reinterpret_cast<const VecFUnaligned*>(p); }
inline void store(float* p, VecF v) { *reinterpret_cast<VecFUnaligned*>(p) = v; }
// x in every lane (set1, not `VecF{} + x`: adding +0 is not an identity for
// -0, so the compiler would keep an add on the critical path).
#if MT_KERNEL_ISA == MT_ISA_AVX512
inline VecF broadcast(float x) { return _mm512_set1_ps(x); }
#else
inline VecF broadcast(float x) { return _mm256_set1_ps(x); }
#endif

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

// a * b + c with one rounding, whatever -ffp-contract says.
#if MT_KERNEL_ISA == MT_ISA_AVX512
inline VecF fmadd(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
#else
inline VecF fmadd(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
#endif

// In place: lane j of r[i] <-> lane i of r[j] (a kLanes x kLanes block of
// rows becomes its columns). Shuffles only: the values are unchanged.
// (GCC 12 warns about the `undefined` pass-through operand of its AVX-512
// shuffle intrinsics once they inline; GCC bug 105593.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if MT_KERNEL_ISA == MT_ISA_AVX512
inline void transpose(VecF r[16]) {
  VecF t[16];
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: a0 b0 a1 b1 | a2 b2 a3 b3
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // r[i + c], 128-bit lane l: column 4 l + c of rows i..i+3
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int c = 0; c < 4; ++c) {  // gather the four 128-bit pieces of columns c, c + 4, c + 8, c + 12
    const VecF u0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), u1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    const VecF u2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88), u3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    t[c] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    t[c + 8] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
    t[c + 4] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    t[c + 12] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}
#else
inline void transpose(VecF r[8]) {
  VecF t[8], s[8];
  for (int i = 0; i < 8; i += 2) {  // per 128-bit lane: a0 b0 a1 b1 | a2 b2 a3 b3
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // s[i + c], 128-bit lane l: column 4 l + c of rows i..i+3
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
    r[c + 4] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
  }
}
#endif
#pragma GCC diagnostic pop

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols, in kLanes x
// kLanes register blocks (masked at the edges; nothing outside is touched).
inline void transpose_block(const float* src, int64_t lds, int rows, int cols, float* dst, int64_t ldd) {
  for (int r0 = 0; r0 < rows; r0 += kLanes) {
    const int nr = rows - r0 < kLanes ? rows - r0 : kLanes;
    const Tail row_tail = tail_of(nr);
    for (int c0 = 0; c0 < cols; c0 += kLanes) {
      const int nc = cols - c0 < kLanes ? cols - c0 : kLanes;
      const Tail col_tail = tail_of(nc);
      VecF v[kLanes];
      for (int j = 0; j < kLanes; ++j) v[j] = j < nr ? load(src + (r0 + j) * lds + c0, col_tail) : VecF{};
      transpose(v);
      for (int c = 0; c < nc; ++c) store(dst + (c0 + c) * ldd + r0, v[c], row_tail);
    }
  }
}

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END

#endif
