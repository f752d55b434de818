#include "meshtrain/comm/hierarchical_group.h"

#include <cstring>
#include <map>

#include "meshtrain/comm/reduce_kernels.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fault_injection.h"
#include "meshtrain/core/threading.h"

namespace meshtrain::comm {

HierarchicalMode parse_hierarchical_mode(const std::string& text) {
  if (text == "auto") return HierarchicalMode::Auto;
  if (text == "on") return HierarchicalMode::On;
  if (text == "off") return HierarchicalMode::Off;
  MT_THROW(ConfigError, "comm.hierarchical = \"", text,
           "\": expected \"auto\" (the planner's choice, docs/comm.md \"Hierarchical collectives\"), \"on\" or \"off\"");
}

std::string_view to_string(HierarchicalMode mode) {
  switch (mode) {
    case HierarchicalMode::Auto: return "auto";
    case HierarchicalMode::On: return "on";
    case HierarchicalMode::Off: return "off";
  }
  return "?";
}

std::string NodeLayout::str() const { return detail::concat(nodes, " nodes x ", local, " ranks"); }

double link_bytes_per_rank(OpKind kind, const NodeLayout& layout, double M) {
  const double n = layout.nodes, piece = M / layout.local;
  return (kind == OpKind::AllReduce ? 2.0 : 1.0) * (n - 1) / n * piece;
}

std::optional<NodeLayout> node_layout(const std::vector<std::string>& host_of_member, int rank, std::string* why) {
  auto no = [&](std::string reason) -> std::optional<NodeLayout> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  // Each node's members as one block [first, first + count) in group order.
  std::vector<std::pair<std::string, int>> blocks;
  for (const std::string& h : host_of_member) {
    if (!blocks.empty() && blocks.back().first == h) {
      ++blocks.back().second;
      continue;
    }
    for (const auto& b : blocks)
      if (b.first == h) return no(detail::concat("the members on ", h, " are not contiguous in the group's order"));
    blocks.emplace_back(h, 1);
  }
  if (blocks.size() < 2) return no("its members are on one node");
  std::string counts;
  bool equal = true;
  for (const auto& b : blocks) {
    counts += detail::concat(counts.empty() ? "" : ", ", b.first, " ", b.second);
    equal = equal && b.second == blocks.front().second;
  }
  if (!equal) return no(detail::concat("its nodes hold different numbers of its members (", counts, ")"));
  const int l = blocks.front().second;
  if (l < 2) return no("it has one member per node: nothing to combine inside a node");
  return NodeLayout{int(blocks.size()), l, rank / l, rank % l};
}

// ---- the group -------------------------------------------------------------------

std::shared_ptr<HierarchicalGroup> HierarchicalGroup::create(std::shared_ptr<ProcessGroup> flat,
                                                             const NodeLayout& layout, Choice choose) {
  MT_CHECK(flat->size() == layout.nodes * layout.local && flat->rank() == layout.node * layout.local + layout.local_rank,
           "node layout ", layout.str(), " (node ", layout.node, ", local rank ", layout.local_rank, ") for rank ",
           flat->rank(), " of group '", flat->name(), "' of ", flat->size());
  auto intra = flat->split(layout.node, flat->rank(), SplitPlace{layout.local, layout.local_rank}, flat->name() + ".intra");
  auto inter = flat->split(layout.local_rank, layout.node, SplitPlace{layout.nodes, layout.node}, flat->name() + ".inter");
  return std::shared_ptr<HierarchicalGroup>(
      new HierarchicalGroup(std::move(flat), std::move(intra), std::move(inter), layout, std::move(choose)));
}

HierarchicalGroup::HierarchicalGroup(std::shared_ptr<ProcessGroup> flat, std::shared_ptr<ProcessGroup> intra,
                                     std::shared_ptr<ProcessGroup> inter, const NodeLayout& layout, Choice choose)
    : ProcessGroup(flat->name(), flat->options()),
      flat_(std::move(flat)),
      intra_(std::move(intra)),
      inter_(std::move(inter)),
      layout_(layout),
      choose_(std::move(choose)) {
  // The worker computes (tree levels' sums) with the creating rank's team
  // and fires its fault points as that rank.
  worker_ = std::thread(&HierarchicalGroup::worker_main, this, compute_threads(), fault::thread_rank());
}

HierarchicalGroup::~HierarchicalGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void HierarchicalGroup::worker_main(int threads, int fault_rank) {
  set_compute_threads(threads);
  fault::set_thread_rank(fault_rank);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job.work->mark_started();
    std::exception_ptr error;
    try {
      job.run();
    } catch (const std::exception& e) {
      // A failed phase fails the whole group: members whose own phases are
      // fine but wait on this one's (another node's, another local rank's)
      // wake too.
      intra_->abort(e.what());
      inter_->abort(e.what());
      error = std::current_exception();
    } catch (...) {
      intra_->abort("a hierarchical collective failed");
      inter_->abort("a hierarchical collective failed");
      error = std::current_exception();
    }
    // Completed with the handle handed to finished_ at once: once waiters
    // wake this thread holds nothing of the op (its error is destroyed by
    // the thread that read it).
    std::lock_guard<std::mutex> lock(mu_);
    if (error) job.work->fail(std::move(error));
    else job.work->complete();
    finished_.push_back(std::move(job.work));
  }
}

std::shared_ptr<ProcessGroup> HierarchicalGroup::split(int color, int key, const std::string& name,
                                                       const GroupOptions& options) {
  return flat_->split(color, key, name, options);
}

void HierarchicalGroup::abort(const std::string& reason) {
  intra_->abort(reason);
  inter_->abort(reason);
  flat_->abort(reason);
}

bool HierarchicalGroup::hierarchical(OpKind kind, DType dtype, size_t count) const {
  if (kind != OpKind::AllReduce && kind != OpKind::ReduceScatter && kind != OpKind::AllGather) return false;
  if (kind != OpKind::AllGather && is_half(dtype)) return false;  // one rounding, as the flat sum
  return !choose_ || choose_(kind, dtype, count);
}

Work HierarchicalGroup::submit(std::function<void(ProcessGroup& intra, ProcessGroup& inter)> job) {
  auto work = std::make_shared<WorkImpl>();
  // A rank unwinding with the job in flight: its peers must wake too.
  work->on_abandon = [intra = intra_, inter = inter_] {
    intra->abort("a member left a hierarchical collective");
    inter->abort("a member left a hierarchical collective");
  };
  std::vector<std::shared_ptr<WorkImpl>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(finished_);
    jobs_.push_back({[this, job = std::move(job)] { job(*intra_, *inter_); }, work});
  }
  cv_.notify_all();
  return Work(work);
}

Work HierarchicalGroup::start(OpDesc& d, bool async) {
  if (!hierarchical(d.kind, d.dtype, d.count)) return delegate(d, async);
  const OpDesc op = d;
  return submit([this, op](ProcessGroup&, ProcessGroup&) {
    switch (op.kind) {
      case OpKind::AllReduce: return all_reduce_phases(op);
      case OpKind::ReduceScatter: return reduce_scatter_phases(op);
      default: return all_gather_phases(op);
    }
  });
}

Work HierarchicalGroup::delegate(const OpDesc& d, bool async) {
  ProcessGroup& g = *flat_;
  const OpOptions o{.timeout = d.timeout, .tag = d.tag};
  void* buf = d.recv;
  switch (d.kind) {
    case OpKind::AllReduce:
      return async ? g.iall_reduce(d.send, d.recv, d.count, d.dtype, d.op, o)
                   : (g.all_reduce(d.send, d.recv, d.count, d.dtype, d.op, o), Work());
    case OpKind::ReduceScatter:
      return async ? g.ireduce_scatter(d.send, d.recv, d.count, d.dtype, d.op, o)
                   : (g.reduce_scatter(d.send, d.recv, d.count, d.dtype, d.op, o), Work());
    case OpKind::AllGather:
      return async ? g.iall_gather(d.send, d.recv, d.count, d.dtype, o)
                   : (g.all_gather(d.send, d.recv, d.count, d.dtype, o), Work());
    case OpKind::AllToAll:
      return async ? g.iall_to_all(d.send, d.send_counts, d.recv, d.recv_counts, d.dtype, o)
                   : (g.all_to_all(d.send, d.send_counts, d.recv, d.recv_counts, d.dtype, o), Work());
    case OpKind::Broadcast:
      return async ? g.ibroadcast(buf, d.count, d.dtype, d.root, o) : (g.broadcast(buf, d.count, d.dtype, d.root, o), Work());
    case OpKind::Send:
      return async ? g.isend(d.send, d.count, d.dtype, d.root, o) : (g.send(d.send, d.count, d.dtype, d.root, o), Work());
    case OpKind::Recv:
      return async ? g.irecv(buf, d.count, d.dtype, d.root, o) : (g.recv(buf, d.count, d.dtype, d.root, o), Work());
    default: return async ? g.ibarrier(o) : (g.barrier(o), Work());
  }
}

// ---- the phases (worker thread) ------------------------------------------------------

namespace {

// Sums of the phases; an average divides the whole sum once, as the flat op.
ReduceOp phase_op(ReduceOp op) { return op == ReduceOp::Avg ? ReduceOp::Sum : op; }

char* at(void* p, size_t elements, size_t es) { return static_cast<char*>(p) + elements * es; }
const char* at(const void* p, size_t elements, size_t es) { return static_cast<const char*>(p) + elements * es; }

// Chunk a·l + j of `count` over n·l ranks moved between the group's order
// and bundle j's place (local-index major), for every a and j.
void reorder(const NodeLayout& L, size_t count, size_t es, const void* from, void* to, bool into_bundles) {
  const int R = L.nodes * L.local;
  for (int j = 0; j < L.local; ++j) {
    size_t pos = chunk_offset(count, L.local, j);
    for (int a = 0; a < L.nodes; ++a) {
      const int c = a * L.local + j;
      const size_t n = chunk_size(count, R, c), group_pos = chunk_offset(count, R, c);
      if (n > 0) {
        if (into_bundles) std::memcpy(at(to, pos, es), at(from, group_pos, es), n * es);
        else std::memcpy(at(to, group_pos, es), at(from, pos, es), n * es);
      }
      pos += n;
    }
    MT_CHECK(pos == chunk_offset(count, L.local, j) + chunk_size(count, L.local, j), "bundle ", j, " of ", count,
             " elements over ", L.str(), " does not tile");
  }
}

}  // namespace

void HierarchicalGroup::all_reduce_phases(const OpDesc& d) {
  const size_t es = dtype_size(d.dtype), off = chunk_offset(d.count, layout_.local, layout_.local_rank),
               mine = chunk_size(d.count, layout_.local, layout_.local_rank);
  const OpOptions o{.timeout = d.timeout};
  char* chunk = at(d.recv, off, es);
  intra_->ireduce_scatter(d.send == d.recv ? d.recv : d.send, chunk, d.count, d.dtype, phase_op(d.op), o).wait();
  inter_->iall_reduce(chunk, chunk, mine, d.dtype, phase_op(d.op), o).wait();
  if (d.op == ReduceOp::Avg) divide_in_place(chunk, mine, d.dtype, size());
  intra_->iall_gather(chunk, d.recv, d.count, d.dtype, o).wait();
}

void HierarchicalGroup::reduce_scatter_phases(const OpDesc& d) {
  const size_t es = dtype_size(d.dtype), off = chunk_offset(d.count, layout_.local, layout_.local_rank),
               bundle = chunk_size(d.count, layout_.local, layout_.local_rank);
  const OpOptions o{.timeout = d.timeout};
  if (scratch_.size() < d.count * es) scratch_.resize(d.count * es);
  reorder(layout_, d.count, es, d.send, scratch_.data(), true);
  intra_->ireduce_scatter(scratch_.data(), at(scratch_.data(), off, es), d.count, d.dtype, phase_op(d.op), o).wait();
  inter_->ireduce_scatter(at(scratch_.data(), off, es), d.recv, bundle, d.dtype, phase_op(d.op), o).wait();
  if (d.op == ReduceOp::Avg) divide_in_place(d.recv, chunk_size(d.count, size(), rank()), d.dtype, size());
}

void HierarchicalGroup::all_gather_phases(const OpDesc& d) {
  const size_t es = dtype_size(d.dtype), off = chunk_offset(d.count, layout_.local, layout_.local_rank),
               bundle = chunk_size(d.count, layout_.local, layout_.local_rank);
  const OpOptions o{.timeout = d.timeout};
  if (scratch_.size() < d.count * es) scratch_.resize(d.count * es);
  inter_->iall_gather(d.send, at(scratch_.data(), off, es), bundle, d.dtype, o).wait();
  intra_->iall_gather(at(scratch_.data(), off, es), scratch_.data(), d.count, d.dtype, o).wait();
  reorder(layout_, d.count, es, scratch_.data(), d.recv, false);
}

HierarchicalGroup* as_hierarchical(ProcessGroup& group) { return dynamic_cast<HierarchicalGroup*>(&group); }

}  // namespace meshtrain::comm
