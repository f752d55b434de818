#include "meshtrain/kernels/cpu/gemm_peak.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "meshtrain/core/allocator.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::kernels {
namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

double measure_gemm_core_flops(DType dtype, int64_t m, int64_t n, int64_t k, double budget_s) {
  auto alloc = CachingAllocator::create();
  const Tensor a = Tensor::zeros(Shape{m, k}, dtype, alloc, MemCategory::Other);
  const Tensor b = Tensor::zeros(Shape{n, k}, dtype, alloc, MemCategory::Other);
  const Tensor c = Tensor::zeros(Shape{m, n}, DType::F32, alloc, MemCategory::Other);
  const KernelTable& kt = kernels_for(c);
  kt.gemm(false, true, 1.0, a, b, 0.0, c);  // warm-up (packing buffers, oneDNN primitive creation)
  const double flops = 2.0 * double(m) * double(n) * double(k);
  double best = 0;
  const double start = thread_cpu_seconds();
  do {
    const double t0 = thread_cpu_seconds();
    kt.gemm(false, true, 1.0, a, b, 0.0, c);
    const double dt = thread_cpu_seconds() - t0;
    if (dt > 0) best = std::max(best, flops / dt);
  } while (thread_cpu_seconds() - start < budget_s);
  return best;
}

double measure_linear_core_flops(DType dtype, int64_t tokens, int64_t out, int64_t in, double budget_s) {
  auto alloc = CachingAllocator::create();
  struct Operands {
    Tensor x, w, dy, y, dx, dw;  // inputs in `dtype`, outputs f32
  };
  auto tensor = [&](int64_t rows, int64_t cols, DType t) {
    return Tensor::zeros(Shape{rows, cols}, t, alloc, MemCategory::Other);
  };
  const double set_bytes = double(dtype_size(dtype)) * double(tokens * in + out * in + tokens * out) +
                           4.0 * double(tokens * out + tokens * in + out * in);
  const int sets = std::max(2, int(std::ceil(double(64 << 20) / set_bytes)));
  std::vector<Operands> ops;
  for (int i = 0; i < sets; ++i)
    ops.push_back({tensor(tokens, in, dtype), tensor(out, in, dtype), tensor(tokens, out, dtype),
                   tensor(tokens, out, DType::F32), tensor(tokens, in, DType::F32), tensor(out, in, DType::F32)});
  const KernelTable& kt = kernels_for(ops.front().y);
  auto layer = [&](Operands& o) {
    kt.gemm(false, true, 1.0, o.x, o.w, 0.0, o.y);    // forward
    kt.gemm(false, false, 1.0, o.dy, o.w, 0.0, o.dx);  // input gradient
    kt.gemm(true, false, 1.0, o.dy, o.x, 0.0, o.dw);   // weight gradient
  };
  for (Operands& o : ops) layer(o);  // warm-up: packing buffers, every page touched
  const double start = thread_cpu_seconds();
  int64_t calls = 0;
  do layer(ops[size_t(calls++ % sets)]);
  while (thread_cpu_seconds() - start < budget_s);
  return 3.0 * 2.0 * double(tokens) * double(out) * double(in) * double(calls) / (thread_cpu_seconds() - start);
}

}  // namespace meshtrain::kernels
