// Covers src/meshtrain/comm/mpi/mpi_watchdog.cc.
// Run under mpirun -np 2: rank 1 never joins. Rank 0's non-blocking wait
// must throw CommTimeout, and its blocking barrier must end in the
// watchdog's message + MPI_Abort instead of an eternal hang.
#include <chrono>
#include <cstdio>
#include <thread>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/error.h"

using namespace meshtrain;

int main() {
  auto world = comm::mpi_world(comm::GroupOptions{.timeout = std::chrono::milliseconds(1000)});
  if (world->rank() == 0) {
    try {
      world->ibarrier().wait();
    } catch (const CommTimeout& e) {
      std::fprintf(stderr, "caught CommTimeout: %s\n", e.what());
    }
    world->barrier();  // never completes: the watchdog aborts the job
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  return 0;
}
