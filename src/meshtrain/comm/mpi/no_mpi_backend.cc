// Stub chosen by CMake when MPI is not available.
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {

static const char* kWhy =
    "meshtrain was built without MPI: install an MPI (e.g. libopenmpi-dev) and reconfigure with "
    "-DMESHTRAIN_WITH_MPI=ON, or use the threads backend";

bool mpi_compiled() { return false; }
std::string mpi_library_version() { return "none (built without MPI)"; }
bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }
std::shared_ptr<ProcessGroup> mpi_world(GroupOptions) { MT_THROW(CommError, kWhy); }
void mpi_abort(const std::string& reason, int code) { MT_THROW(CommError, kWhy, " (abort: ", reason, ")"); }
void mpi_finalize() {}
double mpi_raw_seconds(OpKind, size_t, int) { MT_THROW(CommError, kWhy); }
void mpi_raw_call(OpKind, size_t) { MT_THROW(CommError, kWhy); }

}  // namespace meshtrain::comm
