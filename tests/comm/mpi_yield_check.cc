// Covers yield_when_oversubscribed in src/meshtrain/comm/mpi/mpi_backend.cc
// (docs/comm.md, "Ranks that outnumber their cores"). Prints, after
// MPI_Init, this node's ranks, the cores this rank may use and Open MPI's
// mpi_yield_when_idle as the process sees it; CTest runs it with ranks
// above and within the cores, and with the user's own choice.
#include <cstdio>
#include <cstdlib>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/threading.h"

using namespace meshtrain;

int main() {
  auto world = comm::mpi_world();
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char* yield = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  if (world->rank() == 0)
    std::printf("local ranks %s, cores %d, mpi_yield_when_idle %s\n", local ? local : "?", hardware_cores(),
                yield ? yield : "unset");
  world->barrier();
  world.reset();
  comm::mpi_finalize();
  return 0;
}
