// for_each_rank(n, fn): runs fn(group) on every rank of an n-rank group.
// The threads test binary runs n threads over a ThreadWorld; the MPI test
// binary (under mpirun) uses the first n processes of MPI_COMM_WORLD, so
// the same test bodies cover both backends.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm::testing {

// False when this backend cannot provide n ranks (the test should skip).
bool for_each_rank(int n, const std::function<void(ProcessGroup&)>& fn, GroupOptions options = {});
bool mpi_mode();
int max_ranks();

// Typed buffers for tests: values are stored as doubles and converted.
std::vector<char> make_buffer(DType dt, size_t n, const std::function<double(size_t)>& value);
double get(DType dt, const std::vector<char>& buf, size_t i);
double round_to(DType dt, double v);  // value after a round trip through dt

}  // namespace meshtrain::comm::testing
