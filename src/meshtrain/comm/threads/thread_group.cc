#include "meshtrain/comm/threads/thread_group.h"

#include <algorithm>
#include <cstring>

#include "meshtrain/comm/reduce_kernels.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm::threads {

void Registry::add(const std::shared_ptr<GroupShared>& g) {
  std::lock_guard<std::mutex> lock(mu);
  groups.push_back(g);
  if (!abort_reason.empty()) g->abort(abort_reason);
}

void Registry::abort_all(const std::string& reason) {
  std::vector<std::shared_ptr<GroupShared>> live;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (abort_reason.empty()) abort_reason = reason.empty() ? "world aborted" : reason;
    for (auto& w : groups)
      if (auto g = w.lock()) live.push_back(g);
  }
  for (auto& g : live) g->abort(reason);
}

ThreadGroup::ThreadGroup(std::shared_ptr<GroupShared> shared, int rank, std::shared_ptr<Registry> registry)
    : ProcessGroup(shared->name(), shared->options()), shared_(std::move(shared)), rank_(rank),
      registry_(std::move(registry)) {}

ThreadGroup::~ThreadGroup() {
  // Peers may still read this member's buffers of a queued op.
  shared_->wait_async_idle(rank_);
}

void ThreadGroup::abort(const std::string& reason) {
  shared_->abort(detail::concat("rank ", shared_->rank_name(rank_), " aborted the group: ", reason));
}

// Runs f on the calling thread once this member's earlier non-blocking ops
// are done, so ops of one group execute one at a time in issue order.
template <typename F>
void ThreadGroup::run_inline(F&& f) {
  shared_->wait_async_idle(rank_);
  f();
}

Work ThreadGroup::start(OpDesc& d, bool async) {
  d.deadline = Clock::now() + d.timeout;
  if (d.kind == OpKind::Send) return send_p2p(d);
  if (d.kind == OpKind::Recv) return recv_p2p(d);
  d.seq = ++seq_;
  if (!async || size() == 1) {  // a group of one has nobody to overlap with
    run_inline([&] { execute(d); });
    return async ? Work::completed() : Work();
  }
  auto work = std::make_shared<WorkImpl>();
  // The executor fails the op by itself at its deadline; the margin lets
  // that precise error arrive before wait() gives up on its own.
  work->deadline = d.deadline + std::chrono::seconds(1);
  std::weak_ptr<GroupShared> weak = shared_;
  WorkImpl* raw = work.get();
  const std::string what = detail::concat("group '", name(), "' ", op_kind_name(d.kind), " seq ", d.seq,
                                          " at rank ", rank_, " did not finish within its timeout");
  work->on_abandon = [weak, name = name(), rank = rank_]() {
    if (auto s = weak.lock())
      s->abort(detail::concat("rank ", rank, " of group '", name, "' failed with an operation in flight"));
  };
  work->on_timeout = [weak, raw, what]() -> std::exception_ptr {
    if (auto s = weak.lock()) s->abort(what, AbortKind::Timeout);
    raw->wait_until(Clock::time_point::max());  // the op fails promptly once aborted
    return raw->error();
  };
  shared_->enqueue(rank_, AsyncOp{d, work});
  return Work(std::move(work));
}

void ThreadGroup::execute(OpDesc& d) {
  const Fingerprint fp{d.kind, d.seq, d.kind == OpKind::AllToAll ? 0 : d.count, d.dtype,
                       d.kind == OpKind::Broadcast ? d.root : -1, d.op};
  const void* send = d.send;
  if (d.kind == OpKind::AllToAll && d.send && d.send == d.recv) {
    // Peers read our send buffer while we overwrite recv: stage a copy.
    const size_t bytes = d.bytes();
    if (staging_.size() < bytes) staging_.resize(bytes);
    std::memcpy(staging_.data(), d.send, bytes);
    send = staging_.data();
  }
  enter(d, fp, send);
  run_collective_body(*shared_, rank_, d, send);
  shared_->barrier(rank_, gen_++, /*drain=*/true, d.deadline, fp, &d.waited_s);
}

void ThreadGroup::enter(OpDesc& d, const Fingerprint& fp, const void* send) {
  if (shared_->aborted()) shared_->throw_aborted(rank_, fp, gen_);
  Slot& s = shared_->slot(rank_);
  s.fp = fp;
  s.send = send;
  s.recv = d.recv;
  s.send_counts = d.send_counts.data();
  s.recv_counts = d.recv_counts.data();
  shared_->barrier(rank_, gen_++, /*drain=*/false, d.deadline, fp, &d.waited_s);
  verify(d, fp);
}

// Every member compares all fingerprints, so all reach the same verdict
// and nobody touches a buffer of the wrong size.
void ThreadGroup::verify(const OpDesc& d, const Fingerprint& fp) {
  const int R = size();
  std::string msg;
  for (int p = 0; p < R && msg.empty(); ++p) {
    const Fingerprint& other = shared_->slot(p).fp;
    if (other != fp)
      msg = detail::concat("group '", name(), "' collective mismatch: rank ", shared_->rank_name(rank_), " entered ",
                           fp.str(), " but rank ", shared_->rank_name(p), " entered ", other.str());
  }
  if (msg.empty() && d.kind == OpKind::AllToAll) {
    for (int p = 0; p < R && msg.empty(); ++p)
      for (int q = 0; q < R && msg.empty(); ++q) {
        const size_t sent = shared_->slot(p).send_counts[q], expected = shared_->slot(q).recv_counts[p];
        if (sent != expected)
          msg = detail::concat("group '", name(), "' all_to_all(seq=", d.seq, ") count mismatch: rank ",
                               shared_->rank_name(p), " sends ", sent, " elements to rank ", shared_->rank_name(q),
                               ", which expects ", expected);
      }
  }
  if (msg.empty()) return;
  shared_->abort(msg, AbortKind::Mismatch);
  throw CommMismatch(msg);
}

namespace {

// Below this an op is latency-bound: each rank takes its own chunk. Above
// it ranks claim pieces dynamically so whichever ranks hold a core do the
// work (ranks may outnumber cores).
constexpr size_t kDynamicBytes = 256 * 1024;
constexpr size_t kPieceBytes = 128 * 1024;

// Rank owning element `i` under the balanced partition (types.h).
int owner_of(size_t i, size_t count, int R) {
  const size_t q = count / size_t(R), r = count % size_t(R);
  if (i < r * (q + 1)) return int(i / (q + 1));
  return int(r + (i - r * (q + 1)) / q);
}

}  // namespace

// Calls fn(owner, begin, end) on ranges of [0, count) that never straddle
// a chunk boundary: statically (this rank's chunk) for small ops, else on
// dynamically claimed pieces.
template <typename F>
void for_each_range(GroupShared& shared, int me, size_t count, size_t es, F&& fn) {
  const int R = shared.size();
  if (count * es < kDynamicBytes) {
    const size_t off = chunk_offset(count, R, me), n = chunk_size(count, R, me);
    if (n) fn(me, off, off + n);
    return;
  }
  const size_t piece = std::max<size_t>(1, kPieceBytes / es), pieces = (count + piece - 1) / piece;
  for (size_t k = shared.claim_piece(); k < pieces; k = shared.claim_piece()) {
    size_t b = k * piece;
    const size_t e = std::min(count, b + piece);
    for (int o = owner_of(b, count, R); b < e; ++o) {
      const size_t end = std::min(e, chunk_offset(count, R, o) + chunk_size(count, R, o));
      if (end > b) fn(o, b, end);
      b = end;
    }
  }
}

void run_collective_body(GroupShared& shared, int me, const OpDesc& d, const void* send) {
  const int R = shared.size();
  const size_t es = dtype_size(d.dtype);
  auto at = [es](const void* p, size_t elems) { return static_cast<const char*>(p) + elems * es; };
  auto at_mut = [es](void* p, size_t elems) { return static_cast<char*>(p) + elems * es; };
  std::vector<const void*> srcs(static_cast<size_t>(R));
  std::vector<void*> dsts(static_cast<size_t>(R));
  switch (d.kind) {
    case OpKind::AllReduce: {
      // A piece of every peer's input is reduced in rank order and written
      // into every peer's output: each byte is read and written once.
      const int stream = d.count * es * size_t(R) >= kStreamBytes ? 1 : 0;
      for_each_range(shared, me, d.count, es, [&](int, size_t b, size_t e) {
        for (int p = 0; p < R; ++p) {
          srcs[size_t(p)] = at(shared.slot(p).send, b);
          dsts[size_t(p)] = at_mut(shared.slot(p).recv, b);
        }
        reduce_to_many(srcs.data(), R, dsts.data(), R, e - b, d.dtype, d.op, stream);
      });
      return;
    }
    case OpKind::ReduceScatter: {
      const int stream = d.count * es >= kStreamBytes ? 1 : 0;
      for_each_range(shared, me, d.count, es, [&](int owner, size_t b, size_t e) {
        for (int p = 0; p < R; ++p) srcs[size_t(p)] = at(shared.slot(p).send, b);
        void* out = at_mut(shared.slot(owner).recv, b - chunk_offset(d.count, R, owner));
        reduce_to_many(srcs.data(), R, &out, 1, e - b, d.dtype, d.op, stream);
      });
      return;
    }
    case OpKind::AllGather: {
      // Push: a piece of one rank's input is read once and written into
      // every output.
      const int stream = d.count * es * size_t(R) >= kStreamBytes ? 1 : 0;
      for_each_range(shared, me, d.count, es, [&](int owner, size_t b, size_t e) {
        const void* src = owner == me ? send : shared.slot(owner).send;
        src = at(src, b - chunk_offset(d.count, R, owner));
        for (int p = 0; p < R; ++p) dsts[size_t(p)] = at_mut(shared.slot(p).recv, b);
        copy_to_many(src, dsts.data(), R, (e - b) * es, stream);
      });
      return;
    }
    case OpKind::AllToAll: {
      size_t recv_off = 0;
      for (int p = 0; p < R; ++p) {
        const Slot& s = shared.slot(p);
        size_t send_off = 0;
        for (int q = 0; q < me; ++q) send_off += s.send_counts[q];
        const size_t n = s.send_counts[me];
        if (n) std::memcpy(at_mut(d.recv, recv_off), at(s.send, send_off), n * es);
        recv_off += d.recv_counts[size_t(p)];
      }
      return;
    }
    case OpKind::Broadcast:
      if (me != d.root && d.count) std::memcpy(d.recv, shared.slot(d.root).send, d.count * es);
      return;
    default: return;
  }
}

std::shared_ptr<ProcessGroup> ThreadGroup::split(int color, int key, const std::string& name,
                                                 const GroupOptions& options) {
  std::shared_ptr<ProcessGroup> result;
  run_inline([&] {
    OpDesc d;
    d.kind = OpKind::Split;
    d.timeout = this->options().timeout;
    d.deadline = Clock::now() + d.timeout;
    d.seq = ++seq_;
    const Fingerprint fp{OpKind::Split, d.seq, 0, DType::F32, -1, ReduceOp::Sum};
    Slot& mine = shared_->slot(rank_);
    mine.color = color;
    mine.key = key;
    enter(d, fp, nullptr);
    std::vector<std::pair<int, int>> members;  // (key, parent rank)
    for (int p = 0; p < size(); ++p)
      if (color >= 0 && shared_->slot(p).color == color) members.emplace_back(shared_->slot(p).key, p);
    std::sort(members.begin(), members.end());
    int new_rank = -1;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].second == rank_) new_rank = int(i);
    if (new_rank == 0) {
      std::vector<int> world;
      for (auto& m : members) world.push_back(shared_->world_ranks()[size_t(m.second)]);
      auto g = std::make_shared<GroupShared>(name.empty() ? detail::concat(this->name(), ".", color) : name,
                                             std::move(world), options);
      registry_->add(g);
      mine.split_result = g;
    }
    shared_->barrier(rank_, gen_++, /*drain=*/true, d.deadline, fp, nullptr);
    if (new_rank >= 0)
      result = std::make_shared<ThreadGroup>(shared_->slot(members[0].second).split_result, new_rank, registry_);
    shared_->barrier(rank_, gen_++, /*drain=*/true, d.deadline, fp, nullptr);
    mine.split_result.reset();
  });
  return result;
}

}  // namespace meshtrain::comm::threads
