// MPI backend runtime shared by its source files: initialization state,
// the call lock used when the library is not MPI_THREAD_MULTIPLE, error
// checking and the dtype/op mapping.
#pragma once

#include <mpi.h>

#include <memory>
#include <mutex>
#include <string>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm::mpi {

struct Runtime {
  std::mutex init_mu;
  bool initialized = false, finalized = false;
  bool multiple = false;  // MPI_THREAD_MULTIPLE: any thread may call MPI
  int world_rank = -1;    // cached at init: the watchdog must not call MPI to name itself
  std::recursive_mutex call_mu;  // serializes MPI calls without MPI_THREAD_MULTIPLE
  std::shared_ptr<ProcessGroup> world;
};
Runtime& rt();

// Held around every MPI call when the library is not MPI_THREAD_MULTIPLE.
struct CallLock {
  std::unique_lock<std::recursive_mutex> lock;
  CallLock() {
    if (!rt().multiple) lock = std::unique_lock<std::recursive_mutex>(rt().call_mu);
  }
};

inline void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  MT_THROW(CommError, what, " failed: ", std::string(msg, size_t(len)));
}

inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16: return MPI_UINT16_T;  // moved as bits; reduced in f32
    case DType::F16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

inline int icount(size_t n) {
  MT_REQUIRE(CommError, n <= size_t(INT32_MAX), "MPI counts are int: ", n, " elements is too many for one call");
  return int(n);
}

// Ends the job from any thread. MPI_Abort is legal from any thread only
// under MPI_THREAD_MULTIPLE; otherwise the thread that is stuck inside MPI
// holds the call lock, so the process exits without MPI and mpirun ends
// the other ranks (it treats a rank that exits without MPI_Finalize as a
// failed job).
[[noreturn]] void abort_job(const std::string& message, int code);

}  // namespace meshtrain::comm::mpi
