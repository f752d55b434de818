#include "meshtrain/kernels/cpu/gemm_peak.h"

#include <time.h>

#include <algorithm>

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

}  // namespace meshtrain::kernels
