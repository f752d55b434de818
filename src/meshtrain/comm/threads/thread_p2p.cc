// Point-to-point for the threads backend: a mailbox per destination rank.
// A send that finds its recv posted copies straight into it; otherwise it
// is buffered (reused buffers), so a send never blocks and send-before-recv
// on both sides cannot deadlock. Matching is on (source, tag), FIFO.
#include <cstring>

#include "meshtrain/comm/threads/thread_group.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm::threads {

Work ThreadGroup::send_p2p(const OpDesc& d) {
  const size_t bytes = d.count * dtype_size(d.dtype);
  Mailbox& mb = shared_->mailbox(d.root);
  const Fingerprint fp{OpKind::Send, 0, d.count, d.dtype, d.root, ReduceOp::Sum};
  std::shared_ptr<WorkImpl> matched;
  {
    std::lock_guard<std::mutex> lock(mb.mu);
    if (shared_->aborted()) shared_->throw_aborted(rank_, fp, gen_);
    for (auto it = mb.recvs.begin(); it != mb.recvs.end(); ++it) {
      if (it->src != rank_ || it->tag != d.tag) continue;
      if (it->bytes != bytes) {
        const std::string msg = detail::concat("group '", name(), "' send from rank ", shared_->rank_name(rank_),
                                               " to rank ", shared_->rank_name(d.root), " tag ", d.tag, ": ", bytes,
                                               " bytes sent but the matching recv expects ", it->bytes);
        it->work->fail(std::make_exception_ptr(CommMismatch(msg)));
        mb.recvs.erase(it);
        throw CommMismatch(msg);
      }
      if (bytes) std::memcpy(it->buf, d.send, bytes);
      matched = it->work;
      mb.recvs.erase(it);
      break;
    }
    if (!matched) {
      std::vector<char> buf;
      if (!mb.pool.empty()) {
        buf = std::move(mb.pool.back());
        mb.pool.pop_back();
      }
      buf.resize(bytes);
      if (bytes) std::memcpy(buf.data(), d.send, bytes);
      mb.msgs.push_back(Message{rank_, d.tag, std::move(buf)});
    }
  }
  if (matched) matched->complete();
  return Work::completed();
}

Work ThreadGroup::recv_p2p(const OpDesc& d) {
  const size_t bytes = d.count * dtype_size(d.dtype);
  Mailbox& mb = shared_->mailbox(rank_);
  const Fingerprint fp{OpKind::Recv, 0, d.count, d.dtype, d.root, ReduceOp::Sum};
  auto work = std::make_shared<WorkImpl>();
  work->deadline = d.deadline;
  {
    std::lock_guard<std::mutex> lock(mb.mu);
    if (shared_->aborted()) shared_->throw_aborted(rank_, fp, gen_);
    for (auto it = mb.msgs.begin(); it != mb.msgs.end(); ++it) {
      if (it->src != d.root || it->tag != d.tag) continue;
      if (it->data.size() != bytes)
        MT_THROW(CommMismatch, "group '", name(), "' recv at rank ", shared_->rank_name(rank_), " from rank ",
                 shared_->rank_name(d.root), " tag ", d.tag, ": expects ", bytes, " bytes, message has ",
                 it->data.size());
      if (bytes) std::memcpy(d.recv, it->data.data(), bytes);
      mb.pool.push_back(std::move(it->data));
      mb.msgs.erase(it);
      work->complete();
      return Work(std::move(work));
    }
    mb.recvs.push_back(PendingRecv{d.root, d.tag, d.recv, bytes, work});
  }
  // At the deadline: withdraw the posted recv unless a send filled it.
  std::weak_ptr<GroupShared> weak = shared_;
  WorkImpl* raw = work.get();
  const int me = rank_;
  const std::string what =
      detail::concat("group '", name(), "' recv at rank ", shared_->rank_name(rank_), " from rank ",
                     shared_->rank_name(d.root), " tag ", d.tag, " (", bytes, " bytes) timed out after ",
                     d.timeout.count(), " ms: no matching send arrived");
  work->on_timeout = [weak, raw, me, what]() -> std::exception_ptr {
    auto s = weak.lock();
    if (!s) return std::make_exception_ptr(CommTimeout(what));
    Mailbox& box = s->mailbox(me);
    std::lock_guard<std::mutex> lock(box.mu);
    for (auto it = box.recvs.begin(); it != box.recvs.end(); ++it)
      if (it->work.get() == raw) {
        box.recvs.erase(it);
        return std::make_exception_ptr(CommTimeout(what));
      }
    return nullptr;  // completed or failed meanwhile
  };
  return Work(std::move(work));
}

}  // namespace meshtrain::comm::threads
