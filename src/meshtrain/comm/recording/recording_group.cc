#include "meshtrain/comm/recording/recording_group.h"

#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/core/meta_memory.h"

namespace meshtrain::comm {

namespace {

// Finishes on the lag-th completion test, or when waited for.
class LaggedWork final : public WorkImpl {
 public:
  explicit LaggedWork(int lag) : tests_left_(lag) {}
  bool wait_until(std::chrono::steady_clock::time_point) override {
    complete();
    return true;
  }

 protected:
  void poll() override {
    if (tests_left_ > 0 && --tests_left_ == 0) complete();
  }

 private:
  int tests_left_;
};

// Host memory gets the symmetric group's values; meta memory has none.
void copy_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src || is_meta_pointer(dst) || is_meta_pointer(src)) return;
  std::memmove(dst, src, bytes);
}

void fill_symmetric(const OpDesc& d, int size, int rank) {
  const size_t es = dtype_size(d.dtype);
  switch (d.kind) {
    case OpKind::AllReduce: copy_host(d.recv, d.send, d.count * es); break;
    case OpKind::ReduceScatter:
      copy_host(d.recv, static_cast<const char*>(d.send) + chunk_offset(d.count, size, rank) * es,
                chunk_size(d.count, size, rank) * es);
      break;
    case OpKind::AllGather: {
      const char* mine = static_cast<const char*>(d.send);
      const size_t n = chunk_size(d.count, size, rank) * es;
      for (int r = 0; r < size; ++r)
        if (chunk_size(d.count, size, r) * es == n)
          copy_host(static_cast<char*>(d.recv) + chunk_offset(d.count, size, r) * es, mine, n);
      break;
    }
    case OpKind::AllToAll: {
      // Peer q sends this rank what this rank sends itself.
      size_t own = 0;
      for (int q = 0; q < rank; ++q) own += d.send_counts[size_t(q)];
      const size_t n = d.send_counts[size_t(rank)];
      size_t at = 0;
      for (int q = 0; q < size; ++q) {
        if (d.recv_counts[size_t(q)] == n)
          copy_host(static_cast<char*>(d.recv) + at * es, static_cast<const char*>(d.send) + own * es, n * es);
        at += d.recv_counts[size_t(q)];
      }
      break;
    }
    default: break;  // broadcast, send, recv, barrier: this rank's buffers stay as they are
  }
}

}  // namespace

RecordingGroup::RecordingGroup(std::string name, SplitPlace place, std::shared_ptr<CommLedger> ledger,
                               int completion_lag)
    : ProcessGroup(std::move(name), GroupOptions{}), place_(place), ledger_(std::move(ledger)), lag_(completion_lag) {
  MT_CHECK(place_.size >= 1 && place_.rank >= 0 && place_.rank < place_.size, "recording group '", this->name(),
           "': rank ", place_.rank, " of ", place_.size);
  MT_CHECK(ledger_ != nullptr, "recording group '", this->name(), "' without a ledger");
}

std::shared_ptr<ProcessGroup> RecordingGroup::split(int, int, const std::string& name, const GroupOptions&) {
  MT_THROW(Error, "group '", this->name(), "': a recording group splits only with the new group's size and rank ",
           "stated (split into '", name, "')");
}

std::shared_ptr<ProcessGroup> RecordingGroup::split_placed(int color, int, SplitPlace place, const std::string& name) {
  if (color < 0) return nullptr;
  return std::make_shared<RecordingGroup>(name, place, ledger_, lag_);
}

void RecordingGroup::on_issue(const OpDesc& d) { ledger_->record(name(), size(), d.kind, int64_t(d.bytes())); }

Work RecordingGroup::start(OpDesc& d, bool async) {
  fill_symmetric(d, size(), rank());
  if (!async) return Work();
  return Work(std::make_shared<LaggedWork>(lag_));
}

}  // namespace meshtrain::comm
