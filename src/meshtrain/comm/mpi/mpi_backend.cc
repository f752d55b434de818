// MPI backend runtime: initialization (MPI_THREAD_MULTIPLE, malloc
// tuning), the watchdog, abort and finalize. Ops are in mpi_ops.cc.
#include <climits>

#include "meshtrain/comm/mpi/mpi_group.h"

namespace meshtrain::comm {

using namespace mpi;
bool mpi_compiled() { return true; }
std::string mpi_library_version() {
  // Allowed before MPI_Init; the first line names the implementation.
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, size_t(len));
  const size_t nl = s.find_first_of("\r\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}
bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

std::shared_ptr<ProcessGroup> mpi_world(GroupOptions options) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.init_mu);
  MT_REQUIRE(CommError, !r.finalized, "MPI was already finalized");
  if (!r.initialized) {
    // Large temporaries must come from reused heap memory: a first touch
    // costs ~15 us per 4 KiB page, and with malloc's default mmap for big
    // blocks every large MPI_Allreduce faulted in fresh pages for its
    // temporary buffer. M_MMAP_THRESHOLD caps at 32 MiB, so mmap is turned
    // off for large blocks altogether and freed memory is kept (no trim).
    if (!std::getenv("MESHTRAIN_KEEP_MALLOC")) {
      mallopt(M_MMAP_MAX, 0);
      mallopt(M_TRIM_THRESHOLD, INT_MAX);
      mallopt(M_TOP_PAD, 64 << 20);
    }
    int flag = 0;
    MPI_Initialized(&flag);
    int provided = MPI_THREAD_SINGLE;
    if (!flag) check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    else MPI_Query_thread(&provided);
    r.multiple = provided >= MPI_THREAD_MULTIPLE;
    r.initialized = true;
    r.world = std::make_shared<MpiGroup>(MPI_COMM_WORLD, "world", options);
    r.watchdog = std::thread(watchdog_loop);
  }
  return r.world;
}

void mpi_abort(const std::string& reason, int code) {
  int rank = -1, init = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "meshtrain (world rank %d): %s\n", rank, reason.c_str());
  std::fflush(stderr);
  if (init) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void mpi_finalize() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.init_mu);
  if (!r.initialized || r.finalized) return;
  {
    std::lock_guard<std::mutex> wl(r.wd_mu);
    r.wd_stop = true;
  }
  r.wd_cv.notify_all();
  r.watchdog.join();
  r.world.reset();
  MPI_Finalize();
  r.finalized = true;
}

}  // namespace meshtrain::comm
