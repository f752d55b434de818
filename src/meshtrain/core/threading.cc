#include "meshtrain/core/threading.h"

#include <omp.h>

#include <algorithm>
#include <thread>

namespace meshtrain {

int hardware_cores() { return std::max(1, int(std::thread::hardware_concurrency())); }
void set_compute_threads(int n) { omp_set_num_threads(std::max(1, n)); }
int compute_threads() { return omp_get_max_threads(); }
int threads_per_rank(int ranks) { return std::max(1, hardware_cores() / std::max(1, ranks)); }

}  // namespace meshtrain
