// MPI backend runtime: initialization (MPI_THREAD_MULTIPLE, malloc
// tuning), the watchdog and progress threads, abort and finalize. Ops are
// in mpi_ops.cc.
#include <malloc.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "meshtrain/comm/launch.h"
#include "meshtrain/comm/mpi/mpi_group.h"
#include "meshtrain/comm/mpi/mpi_watchdog.h"
#include "meshtrain/comm/mpi/mpi_work.h"
#include "meshtrain/core/threading.h"

namespace meshtrain::comm {

namespace mpi {
namespace {

// Open MPI busy-polls inside blocking calls unless it knows the node is
// oversubscribed, and it knows only the hostfile's slots. When this node's
// ranks outnumber the cores they may run on (a cpuset, a cgroup quota),
// a spinning rank takes the core from the very peer it waits for and from
// the kernel thread that moves its TCP packets: a blocking call then lasts
// a scheduler tick (milliseconds; docs/comm.md, "Ranks that outnumber their
// cores"). Told before MPI_Init, unless the user chose.
void yield_when_oversubscribed() {
  if (launcher_local_ranks() > hardware_cores()) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
}

}  // namespace

Runtime& rt() {
  static Runtime r;
  return r;
}

void abort_job(const std::string& message, int code) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  // The launcher's record of the abort (train/supervisor.h): mpirun may
  // never end a job whose node stopped answering, so the launcher does.
  if (const char* path = std::getenv("MESHTRAIN_ABORT_FILE"))
    if (std::FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%s\n", message.c_str());
      std::fclose(f);
    }
  int init = 0, fin = 0;
  MPI_Initialized(&init);  // callable from any thread, at any time
  MPI_Finalized(&fin);
  if (init && !fin && rt().multiple) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace mpi

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
    // MESHTRAIN_MPI_THREAD_LEVEL=serialized exercises the path taken with a
    // library built without MPI_THREAD_MULTIPLE (every call under one lock).
    const char* level = std::getenv("MESHTRAIN_MPI_THREAD_LEVEL");
    const int wanted = level && std::string(level) == "serialized" ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE;
    if (!flag) yield_when_oversubscribed();
    if (!flag) check_mpi(MPI_Init_thread(nullptr, nullptr, wanted, &provided), "MPI_Init_thread");
    else MPI_Query_thread(&provided);
    r.multiple = provided >= MPI_THREAD_MULTIPLE;  // else calls are serialized by CallLock
    MPI_Comm_rank(MPI_COMM_WORLD, &r.world_rank);
    r.initialized = true;
    r.world = std::make_shared<MpiGroup>(MPI_COMM_WORLD, "world", options);
    start_watchdog();
    start_progress();
  }
  return r.world;
}

void mpi_abort(const std::string& reason, int code) {
  abort_job(detail::concat("meshtrain (world rank ", rt().world_rank, "): ", reason), code);
}

void mpi_finalize() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.init_mu);
  if (!r.initialized || r.finalized) return;
  stop_progress();
  stop_watchdog();
  r.world.reset();
  MPI_Finalize();
  r.finalized = true;
}

}  // namespace meshtrain::comm
