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

// One op being posted: its blocking or non-blocking MPI call, the staging
// buffers and count arrays that must live until it completes, and what runs
// after it (a bf16 result converted back, an average divided).
class Posting {
 public:
  Posting(OpDesc& d, bool async, MPI_Comm comm, int rank, int size, std::shared_ptr<StagingPool> pool,
          const std::string& group)
      : d_(d), async_(async), comm_(comm), rank_(rank), size_(size), pool_(std::move(pool)), group_(group) {}

  void post_op() {
    switch (d_.kind) {
      case OpKind::AllReduce: return all_reduce();
      case OpKind::ReduceScatter: return reduce_scatter();
      case OpKind::AllGather: return all_gather();
      case OpKind::AllToAll: return all_to_all();
      case OpKind::Broadcast: return broadcast();
      case OpKind::Send:
      case OpKind::Recv: return point_to_point();
      case OpKind::Barrier:
      case OpKind::Split:
        return call([&] { return MPI_Barrier(comm_); }, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); },
                    "MPI_Barrier");
    }
  }
  MPI_Request request() const { return req_; }
  // What runs once the op completed: the post step, then the buffers back.
  std::function<void()> finisher() {
    auto keep = keep_;
    auto pool = pool_;
    return [post = post_, keep, pool] {
      if (post) post();
      for (auto& b : keep->bufs) pool->release(b);
      keep->bufs.clear();
    };
  }

 private:
  struct Keep {
    std::vector<Buf> bufs;
    std::vector<int> a, b, c, e;
  };

  void* stage(size_t bytes) {
    keep_->bufs.push_back(pool_->acquire(bytes));
    return keep_->bufs.back().p;
  }
  size_t element_size() const { return dtype_size(d_.dtype); }
  MPI_Datatype type() const { return mpi_type(d_.dtype); }
  bool half() const { return is_half(d_.dtype); }  // MPI has no 16-bit float sums: reduce in f32

  template <typename Blocking, typename NonBlocking>
  void call(Blocking&& blocking, NonBlocking&& nonblocking, const char* what) {
    if (async_) {
      CallLock lock;
      check_mpi(nonblocking(&req_), what);
      return;
    }
    WatchGuard guard(Watch{.deadline = d_.deadline, .what = {}, .group = &group_, .kind = d_.kind, .seq = d_.seq,
                           .count = d_.count, .rank = rank_});
    const auto t0 = Clock::now();
    {
      CallLock lock;
      check_mpi(blocking(), what);
    }
    d_.waited_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void all_reduce() {
    const MPI_Op op = mpi_op(d_.op);
    const void* sp = d_.send == d_.recv ? MPI_IN_PLACE : d_.send;
    void* rp = d_.recv;
    MPI_Datatype t = type();
    float* f = nullptr;
    const bool bf = half();
    if (bf) {
      f = reinterpret_cast<float*>(stage(d_.count * 4));
      half_to_f32(d_.dtype, static_cast<const uint16_t*>(d_.send), f, d_.count);
      sp = MPI_IN_PLACE, rp = f, t = MPI_FLOAT;
    }
    const int n = icount(d_.count);
    call([&] { return MPI_Allreduce(sp, rp, n, t, op, comm_); },
         [&](MPI_Request* r) { return MPI_Iallreduce(sp, rp, n, t, op, comm_, r); }, "MPI_Allreduce");
    post_ = [d = d_, rp, f, bf, R = size_] {
      if (d.op == ReduceOp::Avg) divide_in_place(rp, d.count, bf ? DType::F32 : d.dtype, R);
      if (bf) f32_to_half(d.dtype, f, static_cast<uint16_t*>(d.recv), d.count);
    };
  }

  void reduce_scatter() {
    const int R = size_;
    const size_t es = element_size();
    keep_->a = chunk_counts(d_.count, R);
    const MPI_Op op = mpi_op(d_.op);
    const size_t mine = chunk_size(d_.count, R, rank_);
    const void* sp = d_.send;
    void* rp = d_.recv;
    MPI_Datatype t = type();
    const bool bf = half();
    const bool in_place = d_.recv == static_cast<const char*>(d_.send) + chunk_offset(d_.count, R, rank_) * es;
    if (bf) {
      float* in = reinterpret_cast<float*>(stage(d_.count * 4));
      half_to_f32(d_.dtype, static_cast<const uint16_t*>(d_.send), in, d_.count);
      sp = in, rp = stage(mine * 4), t = MPI_FLOAT;
    } else if (in_place && mine) {
      rp = stage(mine * es);  // MPI forbids aliased send/recv
    }
    int* counts = keep_->a.data();
    call([&] { return MPI_Reduce_scatter(sp, rp, counts, t, op, comm_); },
         [&](MPI_Request* r) { return MPI_Ireduce_scatter(sp, rp, counts, t, op, comm_, r); }, "MPI_Reduce_scatter");
    post_ = [d = d_, rp, mine, es, bf, R] {
      if (d.op == ReduceOp::Avg) divide_in_place(rp, mine, bf ? DType::F32 : d.dtype, R);
      if (bf) f32_to_half(d.dtype, static_cast<float*>(rp), static_cast<uint16_t*>(d.recv), mine);
      else if (rp != d.recv && mine) std::memcpy(d.recv, rp, mine * es);
    };
  }

  void all_gather() {
    keep_->a = chunk_counts(d_.count, size_);
    keep_->b = displs_of(keep_->a);
    const bool in_place =
        d_.send == static_cast<const char*>(d_.recv) + chunk_offset(d_.count, size_, rank_) * element_size();
    const void* sp = in_place ? MPI_IN_PLACE : d_.send;
    const int n = keep_->a[size_t(rank_)];
    int *counts = keep_->a.data(), *displs = keep_->b.data();
    const MPI_Datatype t = type();
    call([&] { return MPI_Allgatherv(sp, n, t, d_.recv, counts, displs, t, comm_); },
         [&](MPI_Request* r) { return MPI_Iallgatherv(sp, n, t, d_.recv, counts, displs, t, comm_, r); },
         "MPI_Allgatherv");
  }

  void all_to_all() {
    for (size_t c : d_.send_counts) keep_->a.push_back(icount(c));
    for (size_t c : d_.recv_counts) keep_->c.push_back(icount(c));
    keep_->b = displs_of(keep_->a);
    keep_->e = displs_of(keep_->c);
    const void* sp = d_.send;
    if (d_.send && d_.send == d_.recv) {
      void* copy = stage(d_.bytes());
      std::memcpy(copy, d_.send, d_.bytes());
      sp = copy;
    }
    int *sc = keep_->a.data(), *sd = keep_->b.data(), *rc = keep_->c.data(), *rd = keep_->e.data();
    const MPI_Datatype t = type();
    call([&] { return MPI_Alltoallv(sp, sc, sd, t, d_.recv, rc, rd, t, comm_); },
         [&](MPI_Request* r) { return MPI_Ialltoallv(sp, sc, sd, t, d_.recv, rc, rd, t, comm_, r); },
         "MPI_Alltoallv");
  }

  void broadcast() {
    const int n = icount(d_.count);
    const MPI_Datatype t = type();
    call([&] { return MPI_Bcast(d_.recv, n, t, d_.root, comm_); },
         [&](MPI_Request* r) { return MPI_Ibcast(d_.recv, n, t, d_.root, comm_, r); }, "MPI_Bcast");
  }

  void point_to_point() {
    const int n = icount(d_.count);
    const MPI_Datatype t = type();
    if (d_.kind == OpKind::Send)
      call([&] { return MPI_Send(d_.send, n, t, d_.root, d_.tag, comm_); },
           [&](MPI_Request* r) { return MPI_Isend(d_.send, n, t, d_.root, d_.tag, comm_, r); }, "MPI_Send");
    else
      call([&] { return MPI_Recv(d_.recv, n, t, d_.root, d_.tag, comm_, MPI_STATUS_IGNORE); },
           [&](MPI_Request* r) { return MPI_Irecv(d_.recv, n, t, d_.root, d_.tag, comm_, r); }, "MPI_Recv");
  }

  OpDesc& d_;
  const bool async_;
  const MPI_Comm comm_;
  const int rank_, size_;
  const std::shared_ptr<StagingPool> pool_;
  const std::string& group_;
  const std::shared_ptr<Keep> keep_ = std::make_shared<Keep>();
  std::function<void()> post_;
  MPI_Request req_ = MPI_REQUEST_NULL;
};

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
  Posting posting(d, async, comm_, rank_, size_, staging_, name());
  posting.post_op();
  if (!async) {
    posting.finisher()();
    return Work();  // finished: nothing to wait for
  }
  auto work = std::make_shared<MpiWork>();
  work->deadline = d.deadline;
  work->what = describe(d);
  work->reqs = {posting.request()};
  work->finish = posting.finisher();
  work->on_timeout = [what = work->what] { return std::make_exception_ptr(CommTimeout(what + " timed out")); };
  progress_add(work);  // runs while the caller computes (docs/math.md, "Rule: overlap is measured")
  return Work(std::move(work));
}

}  // namespace meshtrain::comm::mpi
