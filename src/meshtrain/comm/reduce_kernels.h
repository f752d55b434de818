// Element-wise reductions in a fixed source order: dst = ((s0 op s1) op s2)
// ... exactly as one rank would compute it serially, so the threads backend
// is bitwise deterministic. bf16 accumulates in f32 and rounds once; Avg is
// the sum divided by nsrc (integer division for integer dtypes).
#pragma once

#include <cstddef>

#include "meshtrain/comm/types.h"
#include "meshtrain/core/dtype.h"

namespace meshtrain::comm {

// Reduces n elements of the nsrc sources into every one of the ndst
// destinations. Works tile by tile (all sources of a tile are read before
// any destination is written), so a destination may alias the same range
// of a source: in-place collectives need no extra buffer.
// `stream`: 1 = non-temporal stores (outputs not read again soon), 0 =
// normal stores, -1 = decide from this call's output size.
void reduce_to_many(const void* const* srcs, int nsrc, void* const* dsts, int ndst, size_t n, DType dtype,
                    ReduceOp op, int stream = -1);

// Copies n elements to every destination, tile by tile so the source is
// read from memory once.
void copy_to_many(const void* src, void* const* dsts, int ndst, size_t bytes, int stream = -1);
// Output size from which streaming stores pay off.
inline constexpr size_t kStreamBytes = size_t(4) << 20;

// Helpers for backends that reduce in another type (MPI + bf16).
// 16-bit floats (bf16, f16) widened to f32 and rounded back (nearest even):
// the reductions of both run in f32.
void half_to_f32(DType dtype, const uint16_t* src, float* dst, size_t n);
void f32_to_half(DType dtype, const float* src, uint16_t* dst, size_t n);
inline bool is_half(DType t) { return t == DType::BF16 || t == DType::F16; }
void bf16_to_f32(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16(const float* src, uint16_t* dst, size_t n);
// buf[i] /= divisor (Avg after a Sum), in the buffer's own dtype.
void divide_in_place(void* buf, size_t n, DType dtype, int divisor);

}  // namespace meshtrain::comm
