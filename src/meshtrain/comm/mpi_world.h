// MPI backend entry points: one rank per process, launched with
//   mpirun -np N <binary> ... --backend mpi
// Groups map to MPI communicators (split = MPI_Comm_split); non-blocking ops
// map to MPI's non-blocking collectives, blocking ops to the blocking ones.
// Built from mpi/mpi_backend.cc when CMake finds MPI, else from
// mpi/no_mpi_backend.cc whose functions throw CommError("built without
// MPI"), so call sites need no #ifdef.
#pragma once

#include <memory>
#include <string>

#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm {

bool mpi_compiled();
// The MPI library's own version line ("Open MPI v4.1.4, ...", up to the first
// comma), or a note that this build has no MPI.
std::string mpi_library_version();
// True when this process was started by mpirun/srun (OMPI_COMM_WORLD_SIZE
// or PMI_SIZE in the environment).
bool launched_by_mpirun();
// Initializes MPI once (MPI_THREAD_MULTIPLE if available, otherwise MPI
// calls are serialized), tunes malloc so staging memory is reused, starts
// the timeout watchdog, and returns this process's world group (the same
// object on every call).
std::shared_ptr<ProcessGroup> mpi_world(GroupOptions options = {});
// Prints `reason` on stderr and calls MPI_Abort: the only way to wake
// peers blocked inside MPI.
[[noreturn]] void mpi_abort(const std::string& reason, int code = 1);
// Finalizes MPI (idempotent); call at the end of main. Groups must be gone.
void mpi_finalize();

// Benchmark support: median seconds (max over ranks per iteration) of the
// raw MPI call for `kind` on MPI_COMM_WORLD with `bytes` of f32 per rank
// (M of docs/math.md (M.19)), reusing its buffers. Collective over the world.
double mpi_raw_seconds(OpKind kind, size_t bytes, int iters);
// One raw MPI call of the same kind (the bench times it like the backend's).
void mpi_raw_call(OpKind kind, size_t bytes);

}  // namespace meshtrain::comm
