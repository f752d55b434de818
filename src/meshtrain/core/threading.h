// One thread pool: OpenMP (libgomp), which oneDNN also uses, so kernels and
// GEMM never oversubscribe the cores. With the threads backend each rank is
// a thread of its own and gets max(1, cores / ranks) OpenMP threads.
#pragma once

namespace meshtrain {

int hardware_cores();
// Sets this thread's OpenMP team size for subsequent parallel regions.
void set_compute_threads(int n);
int compute_threads();
// Compute threads a rank gets when `ranks` share this machine.
int threads_per_rank(int ranks);

}  // namespace meshtrain
