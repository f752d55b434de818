// Work over MPI requests. MPI (OpenMPI here: "OMPI progress: no") advances
// a non-blocking collective only inside MPI calls, so without help an
// MPI_Iallreduce started during backward would run only once someone
// waits: no overlap. The progress engine's thread tests every pending
// request every ~100 us until it completes, so communication runs while
// the ranks compute (docs/math.md, "Rule: overlap is measured"; see bench/dp_bench.cc).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meshtrain/comm/mpi/mpi_watchdog.h"
#include "meshtrain/comm/work.h"

namespace meshtrain::comm::mpi {

class MpiWork final : public WorkImpl {
 public:
  std::vector<MPI_Request> reqs;
  std::function<void()> finish;  // unpack staging, Avg divide, release buffers
  std::string what;

  bool wait_until(Clock::time_point deadline) override;
  // One MPI_Testall (no-op if another thread is testing or it is done);
  // true once finished.
  bool test();

 protected:
  void poll() override { test(); }

 private:
  std::mutex poll_mu_;
  bool done_ = false;
};

// One thread per process drives every pending non-blocking op.
void progress_add(const std::shared_ptr<MpiWork>& work);
void start_progress();
void stop_progress();  // before MPI_Finalize

}  // namespace meshtrain::comm::mpi
