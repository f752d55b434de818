#include "meshtrain/comm/process_group.h"

#include <chrono>
#include <numeric>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/core/rank_activity.h"

// OpDesc is filled with designated initializers naming only what an op uses.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace meshtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  if (!a || !b || abytes == 0 || bbytes == 0) return false;
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bbytes && pb < pa + abytes;
}

}  // namespace

size_t OpDesc::bytes() const {
  size_t n = count;
  if (kind == OpKind::AllToAll) n = std::accumulate(send_counts.begin(), send_counts.end(), size_t(0));
  return n * dtype_size(dtype);
}

void ProcessGroup::validate(const OpDesc& d) const {
  const int R = size(), me = rank();
  const size_t es = dtype_size(d.dtype);
  auto where = [&] { return detail::concat("group '", name_, "' ", op_kind_name(d.kind), ": "); };
  switch (d.kind) {
    case OpKind::AllReduce:
      MT_REQUIRE(CommError, d.send == d.recv || !overlaps(d.send, d.count * es, d.recv, d.count * es), where(),
                 "send and recv overlap partially (in-place means send == recv)");
      break;
    case OpKind::ReduceScatter: {
      const size_t off = chunk_offset(d.count, R, me), n = chunk_size(d.count, R, me);
      const bool in_place = d.recv == static_cast<const char*>(d.send) + off * es;
      MT_REQUIRE(CommError, in_place || !overlaps(d.send, d.count * es, d.recv, n * es), where(),
                 "recv overlaps send; in-place means recv == send + chunk_offset(count, size, rank) = send + ",
                 off, " elements");
      break;
    }
    case OpKind::AllGather: {
      const size_t off = chunk_offset(d.count, R, me), n = chunk_size(d.count, R, me);
      const bool in_place = d.send == static_cast<const char*>(d.recv) + off * es;
      MT_REQUIRE(CommError, in_place || !overlaps(d.send, n * es, d.recv, d.count * es), where(),
                 "send overlaps recv; in-place means send == recv + chunk_offset(count, size, rank) = recv + ",
                 off, " elements");
      break;
    }
    case OpKind::AllToAll:
      MT_REQUIRE(CommError, int(d.send_counts.size()) == R && int(d.recv_counts.size()) == R, where(),
                 "send_counts/recv_counts need one entry per rank (", R, "), got ", d.send_counts.size(), "/",
                 d.recv_counts.size());
      break;
    case OpKind::Broadcast:
      MT_REQUIRE(CommError, d.root >= 0 && d.root < R, where(), "root ", d.root, " outside group of size ", R);
      break;
    case OpKind::Send:
    case OpKind::Recv:
      MT_REQUIRE(CommError, d.root >= 0 && d.root < R, where(), "peer ", d.root, " outside group of size ", R);
      MT_REQUIRE(CommError, d.tag >= 0 && d.tag <= max_tag(), where(), "tag ", d.tag, " outside [0, ", max_tag(),
                 "] (the group's tag bound)");
      break;
    default: break;
  }
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key, SplitPlace place, const std::string& name) {
  return split_placed(color, key, place, name);
}

std::shared_ptr<ProcessGroup> ProcessGroup::split_placed(int color, int key, SplitPlace place,
                                                         const std::string& name) {
  std::shared_ptr<ProcessGroup> g = split(color, key, name, options());
  MT_CHECK(color < 0 || (g && g->size() == place.size && g->rank() == place.rank), "split of group '", name_,
           "' into '", name, "': expected rank ", place.rank, " of ", place.size, ", got rank ", g ? g->rank() : -1,
           " of ", g ? g->size() : 0);
  return g;
}

Work ProcessGroup::issue(OpDesc& d, bool async) {
  if (d.timeout.count() <= 0) d.timeout = options_.timeout;
  validate(d);
  on_issue(d);
  fault::point("collective");  // a rank dying on its way into an op its peers are in
  const auto t0 = Clock::now();
  // One member with its result already in place (a data-parallel group of
  // one, every step): reducing, scattering or gathering a single source
  // into itself is the identity, bit for bit for every backend, op and dtype.
  const bool in_place_kind =
      d.kind == OpKind::AllReduce || d.kind == OpKind::ReduceScatter || d.kind == OpKind::AllGather;
  if (size() == 1 && in_place_kind && d.send == d.recv) {
    stats_->add(d.kind, d.bytes(), since(t0), 0);
    return async ? Work::completed() : Work();
  }
  if (!async) {
    const activity::InCollective in_collective;  // the rank waits on its peers here, not hangs
    double waited = 0, call = 0;
    try {
      Work w = start(d, false);  // empty when it already finished inline
      waited = d.waited_s;
      if (w.valid()) {
        const auto t1 = Clock::now();
        w.wait();
        waited += since(t1);
      }
      call = since(t0);
    } catch (...) {
      stats_->add(d.kind, d.bytes(), since(t0), since(t0));
      throw;
    }
    stats_->add(d.kind, d.bytes(), call, waited);
    return Work();
  }
  Work w = start(d, true);
  stats_->add(d.kind, d.bytes(), since(t0), 0);
  if (WorkImpl* impl = w.impl()) {
    std::weak_ptr<StatsRecorder> rec = stats_;
    const OpKind kind = d.kind;
    impl->on_waited = [rec, kind](double s) {
      if (auto r = rec.lock()) r->add_time(kind, s, s);
    };
  }
  return w;
}

void ProcessGroup::run(OpDesc& d) { issue(d, false); }

// ---- non-blocking ------------------------------------------------------------
Work ProcessGroup::iall_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                               const OpOptions& o) {
  OpDesc d{.kind = OpKind::AllReduce, .send = send, .recv = recv, .count = count, .dtype = dt, .op = op,
           .timeout = o.timeout};
  return issue(d, true);
}
Work ProcessGroup::ireduce_scatter(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                                   const OpOptions& o) {
  OpDesc d{.kind = OpKind::ReduceScatter, .send = send, .recv = recv, .count = count, .dtype = dt, .op = op,
           .timeout = o.timeout};
  return issue(d, true);
}
Work ProcessGroup::iall_gather(const void* send, void* recv, size_t count, DType dt, const OpOptions& o) {
  OpDesc d{.kind = OpKind::AllGather, .send = send, .recv = recv, .count = count, .dtype = dt, .timeout = o.timeout};
  return issue(d, true);
}
Work ProcessGroup::iall_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                               const std::vector<size_t>& recv_counts, DType dt, const OpOptions& o) {
  OpDesc d{.kind = OpKind::AllToAll, .send = send, .recv = recv, .dtype = dt, .send_counts = send_counts,
           .recv_counts = recv_counts, .timeout = o.timeout};
  return issue(d, true);
}
Work ProcessGroup::iall_to_all(const void* send, void* recv, size_t count_per_peer, DType dt, const OpOptions& o) {
  std::vector<size_t> counts(size_t(size()), count_per_peer);
  return iall_to_all(send, counts, recv, counts, dt, o);
}
Work ProcessGroup::ibroadcast(void* buf, size_t count, DType dt, int root, const OpOptions& o) {
  OpDesc d{.kind = OpKind::Broadcast, .send = buf, .recv = buf, .count = count, .dtype = dt, .root = root,
           .timeout = o.timeout};
  return issue(d, true);
}
Work ProcessGroup::isend(const void* buf, size_t count, DType dt, int peer, const OpOptions& o) {
  OpDesc d{.kind = OpKind::Send, .send = buf, .count = count, .dtype = dt, .root = peer, .tag = o.tag,
           .timeout = o.timeout};
  return issue(d, true);
}
Work ProcessGroup::irecv(void* buf, size_t count, DType dt, int peer, const OpOptions& o) {
  OpDesc d{.kind = OpKind::Recv, .recv = buf, .count = count, .dtype = dt, .root = peer, .tag = o.tag,
           .timeout = o.timeout};
  return issue(d, true);
}
Work ProcessGroup::ibarrier(const OpOptions& o) {
  OpDesc d{.kind = OpKind::Barrier, .timeout = o.timeout};
  return issue(d, true);
}

// ---- blocking ------------------------------------------------------------------
void ProcessGroup::all_reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                              const OpOptions& o) {
  OpDesc d{.kind = OpKind::AllReduce, .send = send, .recv = recv, .count = count, .dtype = dt, .op = op,
           .timeout = o.timeout};
  run(d);
}
void ProcessGroup::reduce_scatter(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                                  const OpOptions& o) {
  OpDesc d{.kind = OpKind::ReduceScatter, .send = send, .recv = recv, .count = count, .dtype = dt, .op = op,
           .timeout = o.timeout};
  run(d);
}
void ProcessGroup::all_gather(const void* send, void* recv, size_t count, DType dt, const OpOptions& o) {
  OpDesc d{.kind = OpKind::AllGather, .send = send, .recv = recv, .count = count, .dtype = dt, .timeout = o.timeout};
  run(d);
}
void ProcessGroup::all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                              const std::vector<size_t>& recv_counts, DType dt, const OpOptions& o) {
  OpDesc d{.kind = OpKind::AllToAll, .send = send, .recv = recv, .dtype = dt, .send_counts = send_counts,
           .recv_counts = recv_counts, .timeout = o.timeout};
  run(d);
}
void ProcessGroup::all_to_all(const void* send, void* recv, size_t count_per_peer, DType dt, const OpOptions& o) {
  std::vector<size_t> counts(size_t(size()), count_per_peer);
  all_to_all(send, counts, recv, counts, dt, o);
}
void ProcessGroup::broadcast(void* buf, size_t count, DType dt, int root, const OpOptions& o) {
  OpDesc d{.kind = OpKind::Broadcast, .send = buf, .recv = buf, .count = count, .dtype = dt, .root = root,
           .timeout = o.timeout};
  run(d);
}
void ProcessGroup::send(const void* buf, size_t count, DType dt, int peer, const OpOptions& o) {
  OpDesc d{.kind = OpKind::Send, .send = buf, .count = count, .dtype = dt, .root = peer, .tag = o.tag,
           .timeout = o.timeout};
  run(d);
}
void ProcessGroup::recv(void* buf, size_t count, DType dt, int peer, const OpOptions& o) {
  OpDesc d{.kind = OpKind::Recv, .recv = buf, .count = count, .dtype = dt, .root = peer, .tag = o.tag,
           .timeout = o.timeout};
  run(d);
}
void ProcessGroup::barrier(const OpOptions& o) {
  OpDesc d{.kind = OpKind::Barrier, .timeout = o.timeout};
  run(d);
}

// ---- Tensor convenience ------------------------------------------------------------
static void* ptr(const Tensor& t) { return t.numel() ? t.raw() : nullptr; }

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op, const OpOptions& o) {
  all_reduce(ptr(t), ptr(t), size_t(t.numel()), t.dtype(), op, o);
}
Work ProcessGroup::iall_reduce(const Tensor& t, ReduceOp op, const OpOptions& o) {
  return iall_reduce(ptr(t), ptr(t), size_t(t.numel()), t.dtype(), op, o);
}
void ProcessGroup::all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, const OpOptions& o) {
  MT_REQUIRE(CommError, in.numel() == out.numel() && in.dtype() == out.dtype(), "all_reduce: in ",
             in.shape().str(), " ", dtype_name(in.dtype()), " vs out ", out.shape().str(), " ",
             dtype_name(out.dtype()));
  all_reduce(ptr(in), ptr(out), size_t(in.numel()), in.dtype(), op, o);
}
static void check_chunk(const char* what, int64_t chunk, int64_t full, const ProcessGroup& g) {
  MT_REQUIRE(CommError, size_t(chunk) == chunk_size(size_t(full), g.size(), g.rank()), what, ": rank ", g.rank(),
             " of ", g.size(), " holds chunk_size(", full, ") = ", chunk_size(size_t(full), g.size(), g.rank()),
             " elements, tensor has ", chunk);
}
void ProcessGroup::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, const OpOptions& o) {
  check_chunk("reduce_scatter", out.numel(), in.numel(), *this);
  reduce_scatter(ptr(in), ptr(out), size_t(in.numel()), in.dtype(), op, o);
}
Work ProcessGroup::ireduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, const OpOptions& o) {
  check_chunk("reduce_scatter", out.numel(), in.numel(), *this);
  return ireduce_scatter(ptr(in), ptr(out), size_t(in.numel()), in.dtype(), op, o);
}
void ProcessGroup::all_gather(const Tensor& in, const Tensor& out, const OpOptions& o) {
  check_chunk("all_gather", in.numel(), out.numel(), *this);
  all_gather(ptr(in), ptr(out), size_t(out.numel()), out.dtype(), o);
}
Work ProcessGroup::iall_gather(const Tensor& in, const Tensor& out, const OpOptions& o) {
  check_chunk("all_gather", in.numel(), out.numel(), *this);
  return iall_gather(ptr(in), ptr(out), size_t(out.numel()), out.dtype(), o);
}
void ProcessGroup::all_to_all(const Tensor& in, const Tensor& out, const OpOptions& o) {
  MT_REQUIRE(CommError, in.numel() == out.numel() && in.numel() % size() == 0,
             "all_to_all: equal split needs numel divisible by the group size ", size(), ", got ", in.numel());
  all_to_all(ptr(in), ptr(out), size_t(in.numel()) / size_t(size()), in.dtype(), o);
}
void ProcessGroup::broadcast(const Tensor& t, int root, const OpOptions& o) {
  broadcast(ptr(t), size_t(t.numel()), t.dtype(), root, o);
}
void ProcessGroup::send(const Tensor& t, int peer, const OpOptions& o) {
  send(ptr(t), size_t(t.numel()), t.dtype(), peer, o);
}
void ProcessGroup::recv(const Tensor& t, int peer, const OpOptions& o) {
  recv(ptr(t), size_t(t.numel()), t.dtype(), peer, o);
}

}  // namespace meshtrain::comm
