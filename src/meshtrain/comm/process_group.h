// ProcessGroup: the collective API every backend implements (docs/math.md, "Communication cost model").
//
// Buffers are raw pointer + element count + DType (Tensor overloads below).
// Every op has a non-blocking form i<op>() returning a Work, and a blocking
// form that is i<op>().wait(). Members must issue the same collectives in
// the same order; send/recv match on (peer, tag), FIFO per pair.
//
// Counts (R = size(), chunk i of `count` = chunk_offset/chunk_size in
// types.h: balanced, the first count % R ranks get one element more):
//   all_reduce(send, recv, count):      recv = op over ranks of send; both
//       hold `count`. In-place: send == recv.
//   reduce_scatter(send, recv, count):  send holds `count` (the full
//       vector); rank i receives chunk i of the reduction in recv
//       (chunk_size(count, R, i) elements). In-place: recv == send +
//       chunk_offset(count, R, rank).
//   all_gather(send, recv, count):      recv holds `count`; rank i
//       contributes chunk i from send. In-place: send == recv +
//       chunk_offset(count, R, rank).
//   all_to_all(send, send_counts, recv, recv_counts): send_counts[p]
//       elements go to peer p (packed in peer order), recv_counts[p] come
//       from p; send_counts[p] on rank q must equal recv_counts[q] on p.
//       In-place: send == recv (the backend stages a copy).
//   broadcast(buf, count, root)
// Zero counts are valid everywhere (pointers may then be null). Any other
// overlap of send and recv is an error.
//
// Reductions: Sum, Avg (= Sum / R; integer division for i32/i64), Max, Min.
// bf16 accumulates in f32. The threads backend reduces in rank order,
// ((x0 + x1) + x2) + ..., bitwise equal to a serial loop; MPI does not
// promise an order.
//
// Failure is a group event: an op that cannot finish within its timeout
// throws CommTimeout naming the group, op, sequence number and missing
// ranks; abort() wakes every member blocked in the group with CommAborted.
// One rank's group object is used by one thread at a time.
#pragma once

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/comm_stats.h"
#include "meshtrain/comm/types.h"
#include "meshtrain/comm/work.h"
#include "meshtrain/core/tensor.h"

namespace meshtrain::comm {

// Everything a backend needs to run one operation.
struct OpDesc {
  OpKind kind = OpKind::Barrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;  // broadcast root or send/recv peer
  int tag = 0;
  std::vector<size_t> send_counts, recv_counts;  // all_to_all
  Millis timeout{0};
  uint64_t seq = 0;           // set by the backend
  std::chrono::steady_clock::time_point deadline{};  // set by the backend
  double waited_s = 0;        // blocking path: time blocked on peers (backend fills)
  size_t bytes() const;       // logical message size for CommStats
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend() const = 0;  // "threads" or "mpi"
  const std::string& name() const { return name_; }
  const GroupOptions& options() const { return options_; }

  // Collective over this group: members with the same color form a new
  // group ordered by (key, rank); color < 0 returns nullptr (not a member).
  // The new group inherits this group's options, or takes `options`.
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name = "") {
    return split(color, key, name, options());
  }
  virtual std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name,
                                              const GroupOptions& options) = 0;
  // The same split where the caller knows the new group's size and its own
  // rank in it (the mesh and the engine compute both from the layout):
  // checked against what the split gives, and all a recording group
  // (recording_group.h), which has no peers to ask, needs.
  std::shared_ptr<ProcessGroup> split(int color, int key, SplitPlace place, const std::string& name);
  // The largest tag send/recv accept: the backend's bound (MPI_TAG_UB under
  // MPI, at least 32767), or the group options' lower one.
  int max_tag() const {
    return options_.max_tag > 0 ? std::min(options_.max_tag, backend_max_tag()) : backend_max_tag();
  }
  // Fails every pending and future op of the group on every member.
  virtual void abort(const std::string& reason) = 0;

  CommStats stats() const { return stats_->snapshot(); }
  void reset_stats() { stats_->reset(); }

  // ---- non-blocking -------------------------------------------------------
  Work iall_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op = ReduceOp::Sum,
                   const OpOptions& o = {});
  Work ireduce_scatter(const void* send, void* recv, size_t count, DType dt, ReduceOp op = ReduceOp::Sum,
                       const OpOptions& o = {});
  Work iall_gather(const void* send, void* recv, size_t count, DType dt, const OpOptions& o = {});
  Work iall_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                   const std::vector<size_t>& recv_counts, DType dt, const OpOptions& o = {});
  // Equal split: count_per_peer elements to and from every peer.
  Work iall_to_all(const void* send, void* recv, size_t count_per_peer, DType dt, const OpOptions& o = {});
  Work ibroadcast(void* buf, size_t count, DType dt, int root, const OpOptions& o = {});
  Work isend(const void* buf, size_t count, DType dt, int peer, const OpOptions& o = {});
  Work irecv(void* buf, size_t count, DType dt, int peer, const OpOptions& o = {});
  Work ibarrier(const OpOptions& o = {});

  // ---- blocking -------------------------------------------------------------
  void all_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op = ReduceOp::Sum,
                  const OpOptions& o = {});
  void all_reduce(void* buf, size_t count, DType dt, ReduceOp op = ReduceOp::Sum, const OpOptions& o = {}) {
    all_reduce(buf, buf, count, dt, op, o);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dt, ReduceOp op = ReduceOp::Sum,
                      const OpOptions& o = {});
  void all_gather(const void* send, void* recv, size_t count, DType dt, const OpOptions& o = {});
  void all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                  const std::vector<size_t>& recv_counts, DType dt, const OpOptions& o = {});
  void all_to_all(const void* send, void* recv, size_t count_per_peer, DType dt, const OpOptions& o = {});
  void broadcast(void* buf, size_t count, DType dt, int root, const OpOptions& o = {});
  void send(const void* buf, size_t count, DType dt, int peer, const OpOptions& o = {});
  void recv(void* buf, size_t count, DType dt, int peer, const OpOptions& o = {});
  void barrier(const OpOptions& o = {});

  // ---- Tensor convenience (contiguous tensors; counts from numel) ----------
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum, const OpOptions& o = {});  // in place
  Work iall_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum, const OpOptions& o = {});
  void all_reduce(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum, const OpOptions& o = {});
  // out.numel() == chunk_size(in.numel(), size(), rank())
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum, const OpOptions& o = {});
  Work ireduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum, const OpOptions& o = {});
  // in.numel() == chunk_size(out.numel(), size(), rank())
  void all_gather(const Tensor& in, const Tensor& out, const OpOptions& o = {});
  Work iall_gather(const Tensor& in, const Tensor& out, const OpOptions& o = {});
  void all_to_all(const Tensor& in, const Tensor& out, const OpOptions& o = {});  // equal split
  void broadcast(const Tensor& t, int root, const OpOptions& o = {});
  void send(const Tensor& t, int peer, const OpOptions& o = {});
  void recv(const Tensor& t, int peer, const OpOptions& o = {});

 protected:
  ProcessGroup(std::string name, GroupOptions options) : name_(std::move(name)), options_(options) {}
  virtual std::shared_ptr<ProcessGroup> split_placed(int color, int key, SplitPlace place, const std::string& name);
  virtual int backend_max_tag() const { return std::numeric_limits<int>::max(); }
  // Every op as it is issued (validated, before anything runs), size-1
  // shortcuts included: what CommStats counts.
  virtual void on_issue(const OpDesc&) {}
  // Backends run `d` (validated, timeout resolved). async=false may run
  // inline, fill d.waited_s and return an empty Work (= finished).
  virtual Work start(OpDesc& d, bool async) = 0;
  // Shared so a Work outliving its group can still record its wait.
  std::shared_ptr<StatsRecorder> stats_ = std::make_shared<StatsRecorder>();

 private:
  Work issue(OpDesc& d, bool async);
  void run(OpDesc& d);
  void validate(const OpDesc& d) const;
  std::string name_;
  GroupOptions options_;
};

}  // namespace meshtrain::comm
