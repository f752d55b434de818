// The MPI backend's ProcessGroup: one communicator per group
// (split = MPI_Comm_split); blocking ops call the blocking MPI collective,
// non-blocking ops MPI_I* driven by the progress engine (mpi_work.h).
// Ops are in mpi_ops.cc; the runtime in mpi_runtime.h, the watchdog in
// mpi_watchdog.h, the staging buffers in mpi_staging.h.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "meshtrain/comm/mpi/mpi_runtime.h"
#include "meshtrain/comm/mpi/mpi_staging.h"
#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm::mpi {

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(MPI_Comm comm, std::string name, GroupOptions options);
  ~MpiGroup() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }
  using ProcessGroup::split;
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name,
                                      const GroupOptions& options) override;
  void abort(const std::string& reason) override;

 protected:
  int backend_max_tag() const override { return max_tag_; }
  Work start(OpDesc& d, bool async) override;

 private:
  void check_fingerprint(const OpDesc& d);
  std::string describe(const OpDesc& d) const;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  int max_tag_ = 32767;  // MPI_TAG_UB of the communicator
  uint64_t seq_ = 0;
  std::shared_ptr<StagingPool> staging_ = std::make_shared<StagingPool>();
};

}  // namespace meshtrain::comm::mpi
