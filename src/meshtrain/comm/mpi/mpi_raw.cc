// Raw MPI timings for the benchmark: the same op and size as the backend
// call, on reused buffers, so the backend's overhead can be quoted.
#include <algorithm>
#include <numeric>
#include <vector>

#include "meshtrain/comm/mpi/mpi_runtime.h"

namespace meshtrain::comm {

void mpi_raw_call(OpKind kind, size_t bytes) {
  static std::vector<float> a, b;  // grow-only: first touch happens once
  const size_t n = bytes / 4;
  int R = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &R);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (a.size() < n) a.resize(n, 1.0f);
  if (b.size() < n) b.resize(n, 0.0f);
  std::vector<int> counts(static_cast<size_t>(R)), displs(static_cast<size_t>(R)), per(static_cast<size_t>(R), int(n / size_t(R))), pd(static_cast<size_t>(R));
  for (int i = 0; i < R; ++i) {
    counts[size_t(i)] = int(chunk_size(n, R, i));
    displs[size_t(i)] = int(chunk_offset(n, R, i));
    pd[size_t(i)] = i * int(n / size_t(R));
  }
  auto run = [&] {
    switch (kind) {
      case OpKind::AllReduce: MPI_Allreduce(a.data(), b.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case OpKind::ReduceScatter:
        MPI_Reduce_scatter(a.data(), b.data(), counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case OpKind::AllGather:
        MPI_Allgatherv(a.data(), counts[size_t(me)], MPI_FLOAT, b.data(), counts.data(), displs.data(), MPI_FLOAT,
                       MPI_COMM_WORLD);
        break;
      case OpKind::AllToAll:
        MPI_Alltoallv(a.data(), per.data(), pd.data(), MPI_FLOAT, b.data(), per.data(), pd.data(), MPI_FLOAT,
                      MPI_COMM_WORLD);
        break;
      case OpKind::Broadcast: MPI_Bcast(a.data(), int(n), MPI_FLOAT, 0, MPI_COMM_WORLD); break;
      default: MPI_Barrier(MPI_COMM_WORLD); break;
    }
  };
  run();
}

double mpi_raw_seconds(OpKind kind, size_t bytes, int iters) {
  std::vector<double> times;
  for (int it = 0; it <= iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    mpi_raw_call(kind, bytes);
    double dt = MPI_Wtime() - t0, mx = 0;
    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it > 0) times.push_back(mx);  // the first iteration warms up
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace meshtrain::comm
