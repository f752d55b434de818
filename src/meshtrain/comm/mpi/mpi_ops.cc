// MPI backend operations: one MPI call per op (blocking or MPI_I*), with
// bf16 reduced in f32 through reused staging buffers.
#include <cstring>
#include <numeric>

#include "meshtrain/comm/mpi/mpi_group.h"
#include "meshtrain/comm/mpi/mpi_watchdog.h"
#include "meshtrain/comm/mpi/mpi_work.h"
#include "meshtrain/comm/reduce_kernels.h"

namespace meshtrain::comm::mpi {
namespace {

using Buf = StagingPool::Buf;

std::vector<int> chunk_counts(size_t count, int R) {
  std::vector<int> c(static_cast<size_t>(R));
  for (int i = 0; i < R; ++i) c[size_t(i)] = icount(chunk_size(count, R, i));
  return c;
}
std::vector<int> displs_of(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

void MpiGroup::check_fingerprint(const OpDesc& d) {
  const Fingerprint fp{d.kind, d.seq, d.kind == OpKind::AllToAll ? 0 : d.count, d.dtype,
                       d.kind == OpKind::Broadcast ? d.root : -1, d.op};
  std::vector<Fingerprint> all(static_cast<size_t>(size_));
  {
    WatchGuard guard(d.deadline, describe(d) + " (check mode fingerprint exchange) timed out");
    CallLock call;
    check_mpi(MPI_Allgather(&fp, sizeof fp, MPI_BYTE, all.data(), sizeof fp, MPI_BYTE, comm_), "MPI_Allgather");
  }
  for (int p = 0; p < size_; ++p)
    if (!(all[size_t(p)] == fp))
      MT_THROW(CommMismatch, "group '", name(), "' collective mismatch: rank ", rank_, " entered ", fp.str(),
               " but rank ", p, " entered ", all[size_t(p)].str());
  if (d.kind == OpKind::AllToAll) {
    std::vector<uint64_t> sent(d.send_counts.begin(), d.send_counts.end()), got(static_cast<size_t>(size_));
    {
      CallLock call;
      check_mpi(MPI_Alltoall(sent.data(), 1, MPI_UINT64_T, got.data(), 1, MPI_UINT64_T, comm_), "MPI_Alltoall");
    }
    for (int p = 0; p < size_; ++p)
      if (got[size_t(p)] != d.recv_counts[size_t(p)])
        MT_THROW(CommMismatch, "group '", name(), "' all_to_all(seq=", d.seq, ") count mismatch: rank ", p,
                 " sends ", got[size_t(p)], " elements to rank ", rank_, ", which expects ", d.recv_counts[size_t(p)]);
  }
}

Work MpiGroup::start(OpDesc& d, bool async) {
  d.deadline = Clock::now() + d.timeout;
  if (d.kind != OpKind::Send && d.kind != OpKind::Recv) {
    d.seq = ++seq_;
    if (options().check) check_fingerprint(d);
  }
  const int R = size_;
  const size_t es = dtype_size(d.dtype);
  const MPI_Datatype type = mpi_type(d.dtype);
  auto pool = staging_;
  // Buffers and count arrays must live until a non-blocking op completes.
  struct Keep {
    std::vector<Buf> bufs;
    std::vector<int> a, b, c, e;
  };
  auto keep = std::make_shared<Keep>();
  auto stage = [&](size_t bytes) {
    keep->bufs.push_back(pool->acquire(bytes));
    return keep->bufs.back().p;
  };
  std::function<void()> post;
  MPI_Request req = MPI_REQUEST_NULL;
  auto call = [&](auto&& blocking, auto&& nonblocking, const char* what) {
    if (async) {
      CallLock lock;
      check_mpi(nonblocking(&req), what);
      return;
    }
    WatchGuard guard(Watch{.deadline = d.deadline, .what = {}, .group = &name(), .kind = d.kind, .seq = d.seq,
                           .count = d.count, .rank = rank_});
    const auto t0 = Clock::now();
    {
      CallLock lock;
      check_mpi(blocking(), what);
    }
    d.waited_s = std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const bool bf = is_half(d.dtype);  // MPI has no 16-bit float sums
  switch (d.kind) {
    case OpKind::AllReduce: {
      const MPI_Op op = mpi_op(d.op);
      const void* sp = d.send == d.recv ? MPI_IN_PLACE : d.send;
      void* rp = d.recv;
      MPI_Datatype t = type;
      float* f = nullptr;
      if (bf) {  // MPI has no bf16 sum: reduce in f32
        f = reinterpret_cast<float*>(stage(d.count * 4));
        half_to_f32(d.dtype, static_cast<const uint16_t*>(d.send), f, d.count);
        sp = MPI_IN_PLACE, rp = f, t = MPI_FLOAT;
      }
      const int n = icount(d.count);
      call([&] { return MPI_Allreduce(sp, rp, n, t, op, comm_); },
           [&](MPI_Request* r) { return MPI_Iallreduce(sp, rp, n, t, op, comm_, r); }, "MPI_Allreduce");
      post = [=] {
        if (d.op == ReduceOp::Avg) divide_in_place(rp, d.count, bf ? DType::F32 : d.dtype, R);
        if (bf) f32_to_half(d.dtype, f, static_cast<uint16_t*>(d.recv), d.count);
      };
      break;
    }
    case OpKind::ReduceScatter: {
      keep->a = chunk_counts(d.count, R);
      const MPI_Op op = mpi_op(d.op);
      const size_t mine = chunk_size(d.count, R, rank_);
      const void* sp = d.send;
      void* rp = d.recv;
      MPI_Datatype t = type;
      const bool in_place = d.recv == static_cast<const char*>(d.send) + chunk_offset(d.count, R, rank_) * es;
      if (bf) {
        float* in = reinterpret_cast<float*>(stage(d.count * 4));
        half_to_f32(d.dtype, static_cast<const uint16_t*>(d.send), in, d.count);
        sp = in, rp = stage(mine * 4), t = MPI_FLOAT;
      } else if (in_place && mine) {
        rp = stage(mine * es);  // MPI forbids aliased send/recv
      }
      int* counts = keep->a.data();
      call([&] { return MPI_Reduce_scatter(sp, rp, counts, t, op, comm_); },
           [&](MPI_Request* r) { return MPI_Ireduce_scatter(sp, rp, counts, t, op, comm_, r); },
           "MPI_Reduce_scatter");
      post = [=] {
        if (d.op == ReduceOp::Avg) divide_in_place(rp, mine, bf ? DType::F32 : d.dtype, R);
        if (bf) f32_to_half(d.dtype, static_cast<float*>(rp), static_cast<uint16_t*>(d.recv), mine);
        else if (rp != d.recv && mine) std::memcpy(d.recv, rp, mine * es);
      };
      break;
    }
    case OpKind::AllGather: {
      keep->a = chunk_counts(d.count, R);
      keep->b = displs_of(keep->a);
      const bool in_place = d.send == static_cast<const char*>(d.recv) + chunk_offset(d.count, R, rank_) * es;
      const void* sp = in_place ? MPI_IN_PLACE : d.send;
      const int n = keep->a[size_t(rank_)];
      int *counts = keep->a.data(), *displs = keep->b.data();
      call([&] { return MPI_Allgatherv(sp, n, type, d.recv, counts, displs, type, comm_); },
           [&](MPI_Request* r) { return MPI_Iallgatherv(sp, n, type, d.recv, counts, displs, type, comm_, r); },
           "MPI_Allgatherv");
      break;
    }
    case OpKind::AllToAll: {
      for (size_t c : d.send_counts) keep->a.push_back(icount(c));
      for (size_t c : d.recv_counts) keep->c.push_back(icount(c));
      keep->b = displs_of(keep->a);
      keep->e = displs_of(keep->c);
      const void* sp = d.send;
      if (d.send && d.send == d.recv) {
        void* copy = stage(d.bytes());
        std::memcpy(copy, d.send, d.bytes());
        sp = copy;
      }
      int *sc = keep->a.data(), *sd = keep->b.data(), *rc = keep->c.data(), *rd = keep->e.data();
      call([&] { return MPI_Alltoallv(sp, sc, sd, type, d.recv, rc, rd, type, comm_); },
           [&](MPI_Request* r) { return MPI_Ialltoallv(sp, sc, sd, type, d.recv, rc, rd, type, comm_, r); },
           "MPI_Alltoallv");
      break;
    }
    case OpKind::Broadcast: {
      const int n = icount(d.count);
      call([&] { return MPI_Bcast(d.recv, n, type, d.root, comm_); },
           [&](MPI_Request* r) { return MPI_Ibcast(d.recv, n, type, d.root, comm_, r); }, "MPI_Bcast");
      break;
    }
    case OpKind::Send: {
      const int n = icount(d.count);
      call([&] { return MPI_Send(d.send, n, type, d.root, d.tag, comm_); },
           [&](MPI_Request* r) { return MPI_Isend(d.send, n, type, d.root, d.tag, comm_, r); }, "MPI_Send");
      break;
    }
    case OpKind::Recv: {
      const int n = icount(d.count);
      call([&] { return MPI_Recv(d.recv, n, type, d.root, d.tag, comm_, MPI_STATUS_IGNORE); },
           [&](MPI_Request* r) { return MPI_Irecv(d.recv, n, type, d.root, d.tag, comm_, r); }, "MPI_Recv");
      break;
    }
    case OpKind::Barrier:
    case OpKind::Split:
      call([&] { return MPI_Barrier(comm_); }, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); },
           "MPI_Barrier");
      break;
  }
  auto release = [keep, pool] {
    for (auto& b : keep->bufs) pool->release(b);
    keep->bufs.clear();
  };
  if (!async) {
    if (post) post();
    release();
    return Work();  // finished: nothing to wait for
  }
  auto work = std::make_shared<MpiWork>();
  work->deadline = d.deadline;
  work->what = describe(d);
  work->reqs = {req};
  work->finish = [post, release] {
    if (post) post();
    release();
  };
  const std::string what = describe(d);
  work->on_timeout = [what] { return std::make_exception_ptr(CommTimeout(what + " timed out")); };
  progress_add(work);  // runs while the caller computes (docs/math.md, "Rule: overlap is measured")
  return Work(std::move(work));
}

}  // namespace meshtrain::comm::mpi
