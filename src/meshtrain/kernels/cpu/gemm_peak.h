// The best rate of the kernel table's GEMM on one core, the per-core peak
// that MFU divides by (`meshtrain bench machine` writes it as peak_tflops;
// training caches it per CPU: train/peak_flops.h). Each product is timed by
// the calling thread's CPU time, so other processes sharing the core do not
// dilute the figure: a busy machine measures what a quiet one does.
#pragma once

#include <cstdint>

#include "meshtrain/core/dtype.h"

namespace meshtrain::kernels {

// FLOP/s of the best of repeated (m x k) . (n x k)^T products in `dtype`
// (f32 accumulation) on the calling thread, for about `budget_s` seconds of
// its CPU time. The caller sets the thread's compute threads (one core: 1).
double measure_gemm_core_flops(DType dtype, int64_t m, int64_t n, int64_t k, double budget_s);

// What a training step's linear layer (`out` x `in` over `tokens` rows)
// achieves on the calling thread: its three products, y = x W^T, dx = dy W
// and dW = dy^T x, one after another over sets of operands that together
// hold at least 64 MiB, so that each product reads operands from beyond the
// core's caches as a step's layers follow one another; FLOP/s of all the
// products over their CPU time (a mean, not the best) for about `budget_s`
// seconds. The caller sets the thread's compute threads.
double measure_linear_core_flops(DType dtype, int64_t tokens, int64_t out, int64_t in, double budget_s);

}  // namespace meshtrain::kernels
