#include "meshtrain/comm/mpi/mpi_group.h"

#include "meshtrain/comm/mpi/mpi_watchdog.h"

namespace meshtrain::comm::mpi {

MpiGroup::MpiGroup(MPI_Comm comm, std::string name, GroupOptions options)
    : ProcessGroup(std::move(name), options), comm_(comm) {
  CallLock call;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
  if (found && ub) max_tag_ = *ub;
}

MpiGroup::~MpiGroup() {
  if (comm_ != MPI_COMM_WORLD && !rt().finalized) {
    CallLock call;
    MPI_Comm_free(&comm_);
  }
}

std::shared_ptr<ProcessGroup> MpiGroup::split(int color, int key, const std::string& name,
                                              const GroupOptions& options) {
  MPI_Comm out = MPI_COMM_NULL;
  {
    WatchGuard guard(Clock::now() + this->options().timeout, detail::concat("group '", this->name(), "' split"));
    CallLock call;
    check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split");
  }
  if (out == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiGroup>(out, name.empty() ? detail::concat(this->name(), ".", color) : name, options);
}

void MpiGroup::abort(const std::string& reason) {
  mpi_abort(detail::concat("group '", name(), "' aborted by rank ", rank_, ": ", reason));
}

std::string MpiGroup::describe(const OpDesc& d) const {
  return detail::concat("group '", name(), "' ", op_kind_name(d.kind), "(seq=", d.seq, ", count=", d.count,
                        ", dtype=", dtype_name(d.dtype), ") at rank ", rank_, " (MPI cannot tell which peer is missing)");
}

}  // namespace meshtrain::comm::mpi
