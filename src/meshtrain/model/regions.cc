#include "meshtrain/model/regions.h"

#include <chrono>

#include "meshtrain/model/tree_reduce.h"
#include "meshtrain/core/error.h"

namespace meshtrain::model {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

const char* to_string(TpCollective c) {
  switch (c) {
    case TpCollective::AllReduce: return "all_reduce";
    case TpCollective::AllGather: return "all_gather";
    case TpCollective::ReduceScatter: return "reduce_scatter";
  }
  return "?";
}

// ---- TpCommStats ---------------------------------------------------------------

void TpCommStats::add(int segment, TpCollective c, int64_t message_bytes, int group_size, double seconds,
                      double overlapped_seconds) {
  MT_CHECK(segment >= 0 && segment < num_segments(), "tp stats: segment ", segment, " of ", num_segments());
  Entry& e = by_segment_[size_t(segment)][size_t(c)];
  const int t = group_size;
  // docs/math.md (M.22): a ring all-reduce sends 2 (t-1)/t M per rank, the others (t-1)/t M.
  const int64_t rounds = c == TpCollective::AllReduce ? 2 : 1;
  e.calls += 1;
  e.message_bytes += message_bytes;
  e.ring_bytes += rounds * (t - 1) * message_bytes / t;
  e.seconds += seconds;
  e.overlapped_seconds += overlapped_seconds;
}

void TpCommStats::reset() {
  for (auto& seg : by_segment_) seg = {};
}

namespace {
void accumulate(TpCommStats::Entry& into, const TpCommStats::Entry& e) {
  into.calls += e.calls;
  into.message_bytes += e.message_bytes;
  into.ring_bytes += e.ring_bytes;
  into.seconds += e.seconds;
  into.overlapped_seconds += e.overlapped_seconds;
}
}  // namespace

TpCommStats::Entry TpCommStats::segment_total(int segment) const {
  Entry t;
  for (const Entry& e : by_segment_[size_t(segment)]) accumulate(t, e);
  return t;
}

TpCommStats::Entry TpCommStats::total(TpCollective c) const {
  Entry t;
  for (const auto& seg : by_segment_) accumulate(t, seg[size_t(c)]);
  return t;
}

TpCommStats::Entry TpCommStats::total() const {
  Entry t;
  for (int s = 0; s < num_segments(); ++s) accumulate(t, segment_total(s));
  return t;
}

// ---- TpRegions -------------------------------------------------------------------

TpRegions::TpRegions(comm::ProcessGroup* group, bool sequence_parallel, TpCommStats* stats, int segment,
                     int canonical_blocks, std::shared_ptr<CachingAllocator> alloc, bool overlap)
    : group_(group),
      sequence_parallel_(sequence_parallel),
      stats_(stats),
      segment_(segment),
      canonical_blocks_(canonical_blocks),
      alloc_(std::move(alloc)),
      overlap_(overlap) {}

int64_t TpRegions::local_rows(int64_t n) const {
  if (!sequence_parallel_) return n;
  const int t = size();
  MT_REQUIRE(ConfigError, n % t == 0, "sequence parallelism: a micro-batch of ", n,
             " tokens (rows x seq) does not split over parallel.tp = ", t, " ranks (", n, " % ", t, " = ", n % t,
             "); data.seq_len must be a multiple of parallel.tp");
  return n / t;
}

void TpRegions::count(TpCollective c, int64_t message_bytes, double seconds, double overlapped_seconds) const {
  if (stats_) stats_->add(segment_, c, message_bytes, size(), seconds, overlapped_seconds);
}

void TpRegions::all_reduce(const Tensor& t, comm::ReduceOp op) const {
  if (!active()) return;
  const auto t0 = Clock::now();
  // A maximum is exact in any order; a sum of canonical subtrees finishes their tree (M.73).
  if (canonical_blocks_ > 0 && op == comm::ReduceOp::Sum)
    model::tree_all_reduce(*group_, t, alloc_);
  else
    group_->all_reduce(t, op);
  count(TpCollective::AllReduce, int64_t(t.nbytes()), since(t0));
}

void TpRegions::all_gather_rows(const Tensor& shard, const Tensor& full) const {
  MT_CHECK(full.numel() == shard.numel() * size(), "all_gather_rows: ", shard.shape().str(), " x ", size(), " vs ",
           full.shape().str());
  if (!active()) return full.copy_from(shard);
  const auto t0 = Clock::now();
  group_->all_gather(shard, full);
  count(TpCollective::AllGather, int64_t(full.nbytes()), since(t0));
}

void TpRegions::reduce_scatter_rows(const Tensor& full, const Tensor& shard) const {
  MT_CHECK(full.numel() == shard.numel() * size(), "reduce_scatter_rows: ", full.shape().str(), " / ", size(),
           " vs ", shard.shape().str());
  if (!active()) return shard.copy_from(full);
  const auto t0 = Clock::now();
  if (canonical_blocks_ > 0) {
    // The tree leaves rank r's chunk (its rows: n % t == 0) in place (M.73).
    model::tree_reduce_scatter(*group_, full, alloc_);
    shard.copy_from(full.flat_slice(rank() * shard.numel(), (rank() + 1) * shard.numel()));
  } else {
    group_->reduce_scatter(full, shard);
  }
  count(TpCollective::ReduceScatter, int64_t(full.nbytes()), since(t0));
}

Tensor TpRegions::column_input(const Tensor& x_local, int64_t n, const std::shared_ptr<CachingAllocator>& alloc,
                               MemCategory cat) const {
  return start_gather(x_local, n, alloc, cat, /*in_flight=*/false).rows;  // copy-to-group: identity
}

TpRegions::PendingRows TpRegions::start_column_input(const Tensor& x_local, int64_t n,
                                                     const std::shared_ptr<CachingAllocator>& alloc,
                                                     MemCategory cat) const {
  return start_gather(x_local, n, alloc, cat, overlaps());
}

TpRegions::PendingRows TpRegions::start_gather(const Tensor& local, int64_t n,
                                               const std::shared_ptr<CachingAllocator>& alloc, MemCategory cat,
                                               bool in_flight) const {
  PendingRows p;
  p.kind = TpCollective::AllGather;
  if (!sequence_parallel_ || !active()) {
    p.rows = local;
    return p;
  }
  p.rows = Tensor::empty(Shape{n, local.dim(local.rank() - 1)}, local.dtype(), alloc, cat);
  if (in_flight)
    p.pieces.push_back({group_->iall_gather(local, p.rows), int64_t(p.rows.nbytes()), local});
  else
    all_gather_rows(local, p.rows);
  return p;
}

Tensor TpRegions::column_input_grad(const Tensor& dx_partial, const std::shared_ptr<CachingAllocator>& alloc) const {
  PendingRows pending = start_sum(dx_partial, alloc, MemCategory::Workspace, /*in_flight=*/false);
  return finish(pending);  // copy-to-group backward: the partial input gradients summed (M.36)
}

TpRegions::PendingRows TpRegions::start_column_input_grad(const Tensor& dx_partial,
                                                          const std::shared_ptr<CachingAllocator>& alloc) const {
  return start_sum(dx_partial, alloc, MemCategory::Workspace, overlaps());
}

TpRegions::PendingRows TpRegions::start_sum(const Tensor& partial, const std::shared_ptr<CachingAllocator>& alloc,
                                            MemCategory cat, bool in_flight) const {
  PendingRows p;
  if (!sequence_parallel_ || !active()) {
    p.rows = partial;  // summed in place
    if (in_flight) {
      p.kind = TpCollective::AllReduce;
      p.pieces.push_back({group_->iall_reduce(partial), int64_t(partial.nbytes()), partial});
    } else {
      all_reduce(partial);
    }
    return p;
  }
  const int64_t n = partial.dim(0);
  p.rows = Tensor::empty(Shape{local_rows(n), partial.dim(1)}, partial.dtype(), alloc, cat);
  if (in_flight) {
    p.kind = TpCollective::ReduceScatter;
    p.pieces.push_back({group_->ireduce_scatter(partial, p.rows), int64_t(partial.nbytes()), partial});
  } else {
    reduce_scatter_rows(partial, p.rows);
  }
  return p;
}

Tensor TpRegions::finish(PendingRows& pending) const {
  for (PendingRows::Piece& piece : pending.pieces) {
    const auto t0 = Clock::now();
    piece.work.wait();
    // Exposed: the wait (its wake-up included, as for the blocking regions).
    // Overlapped: issue to end, less the part after the wait began: the
    // time the sum ran behind the work between (docs/math.md (M.24)).
    const double waited = since(t0);
    count(pending.kind, piece.message_bytes, waited, piece.work.in_flight_seconds() - piece.work.seconds_until_done(t0));
  }
  pending.pieces.clear();
  return pending.rows;
}

TpRegions::PendingRows TpRegions::start_row_output(
    int64_t n, int64_t d, DType dt, const std::shared_ptr<CachingAllocator>& alloc, MemCategory cat,
    const std::function<void(const Tensor& out, int64_t first_row)>& project) const {
  PendingRows p;
  const int t = size(), pieces = row_output_pieces();
  const bool split = overlaps() && (sequence_parallel_ ? n % (int64_t(t) * pieces) == 0 : n >= pieces);
  if (!split) {
    Tensor partial = Tensor::empty(Shape{n, d}, dt, alloc, MemCategory::Workspace);
    project(partial, 0);
    return start_sum(partial, alloc, cat, /*in_flight=*/false);
  }
  if (!sequence_parallel_) {
    // Piece c: rows [c n / P, (c + 1) n / P) of the partial output, all-reduced in place (M.35).
    p.kind = TpCollective::AllReduce;
    p.rows = Tensor::empty(Shape{n, d}, dt, alloc, MemCategory::Workspace);
    for (int c = 0; c < pieces; ++c) {
      const Tensor rows = p.rows.slice(c * n / pieces, (c + 1) * n / pieces);
      project(rows, c * n / pieces);
      p.pieces.push_back({group_->iall_reduce(rows), int64_t(rows.nbytes()), rows});
    }
    return p;
  }
  // Piece c: the c-th m = n / (t P) rows of every rank's n / t, laid out
  // rank after rank, reduce-scattered into this rank's rows c m .. (c + 1) m.
  p.kind = TpCollective::ReduceScatter;
  const int64_t nl = local_rows(n), m = nl / pieces;
  p.rows = Tensor::empty(Shape{nl, d}, dt, alloc, cat);
  for (int c = 0; c < pieces; ++c) {
    const Tensor piece = Tensor::empty(Shape{int64_t(t) * m, d}, dt, alloc, MemCategory::Workspace);
    for (int r = 0; r < t; ++r) project(piece.slice(r * m, (r + 1) * m), r * nl + c * m);
    p.pieces.push_back({group_->ireduce_scatter(piece, p.rows.slice(c * m, (c + 1) * m)), int64_t(piece.nbytes()), piece});
  }
  return p;
}

Tensor TpRegions::row_output(const Tensor& partial, const std::shared_ptr<CachingAllocator>& alloc,
                             MemCategory cat) const {
  PendingRows pending = start_sum(partial, alloc, cat, /*in_flight=*/false);
  return finish(pending);  // reduce-from-group (M.35)
}

Tensor TpRegions::row_output_grad(const Tensor& dy_local, int64_t n, const std::shared_ptr<CachingAllocator>& alloc,
                                  MemCategory cat) const {
  return start_gather(dy_local, n, alloc, cat, /*in_flight=*/false).rows;  // reduce-from-group backward: identity
}

TpRegions::PendingRows TpRegions::start_row_output_grad(const Tensor& dy_local, int64_t n,
                                                        const std::shared_ptr<CachingAllocator>& alloc,
                                                        MemCategory cat) const {
  return start_gather(dy_local, n, alloc, cat, overlaps());
}

}  // namespace meshtrain::model
