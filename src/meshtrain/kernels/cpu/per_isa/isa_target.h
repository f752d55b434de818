// Compiles the code between MT_ISA_BEGIN and MT_ISA_END for one ISA level,
// in its own namespace meshtrain::kernels::MT_ISA_NS (scalar | avx2 |
// avx512). kernels/CMakeLists.txt builds every file of per_isa/ once per
// level with MT_KERNEL_ISA set; dispatch.cc picks one at run time (isa.h).
//
// Rules that keep a portable binary free of stray AVX code:
//  - include every header (std, core, elementwise.h) BEFORE MT_ISA_BEGIN:
//    what they define stays baseline code (the linker may keep any copy of
//    an inline function, so no shared inline function may be compiled for
//    a wider ISA);
//  - put everything between BEGIN and END in namespace MT_ISA_NS.
// Baseline helpers (fast_exp, parallel_range) still inline into the wider
// code, as a callee's ISA is a subset of the caller's.
#pragma once

#include <immintrin.h>

#define MT_ISA_SCALAR 0
#define MT_ISA_AVX2 1
#define MT_ISA_AVX512 2

#if !defined(MT_KERNEL_ISA)
#error "per_isa/ files are compiled once per ISA level: kernels/CMakeLists.txt sets MT_KERNEL_ISA"
#endif

#if MT_KERNEL_ISA == MT_ISA_AVX512
#define MT_ISA_NS avx512
#if defined(__clang__)
#define MT_ISA_BEGIN                                                                                         \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c\"))), " \
          "apply_to = function)")
#define MT_ISA_END _Pragma("clang attribute pop")
#else
#define MT_ISA_BEGIN \
  _Pragma("GCC push_options") \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,prefer-vector-width=512\")")
#define MT_ISA_END _Pragma("GCC pop_options")
#endif

#elif MT_KERNEL_ISA == MT_ISA_AVX2
#define MT_ISA_NS avx2
#if defined(__clang__)
#define MT_ISA_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
#define MT_ISA_END _Pragma("clang attribute pop")
#else
#define MT_ISA_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define MT_ISA_END _Pragma("GCC pop_options")
#endif

#elif MT_KERNEL_ISA == MT_ISA_SCALAR
#define MT_ISA_NS scalar
#define MT_ISA_BEGIN
#define MT_ISA_END

#else
#error "MT_KERNEL_ISA must be MT_ISA_SCALAR, MT_ISA_AVX2 or MT_ISA_AVX512"
#endif

// Explicit instantiations: float at every level, double (the gradient-check
// reference, dispatched to scalar only) at the scalar level.
#if MT_KERNEL_ISA == MT_ISA_SCALAR
#define MT_PER_ISA_INSTANTIATE(M) M(float) M(double)
#else
#define MT_PER_ISA_INSTANTIATE(M) M(float)
#endif
