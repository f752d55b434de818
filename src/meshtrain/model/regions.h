// Tensor-parallel regions (docs/math.md, "The four region pairs", "Sequence parallelism"): the
// only places a layer talks to its tensor-parallel group, as forward/backward pairs on the group:
//   copy-to-group             forward identity        backward all-reduce (sum)
//   reduce-from-group         forward all-reduce      backward identity
//   gather-from-sequence      forward all-gather      backward reduce-scatter
//   scatter-to-sequence       forward reduce-scatter  backward all-gather
// A column-parallel layer is a plain Linear behind the first (or, under
// sequence parallelism, the third) pair; a row-parallel layer a plain
// Linear in front of the second (or the fourth): (M.34)-(M.35), with the
// column-parallel layers' partial input gradients summed in backward (M.36).
// The residual stream of a rank is all n tokens of a micro-batch, or under
// sequence parallelism its n / t contiguous rows of the flattened
// [rows x seq] tokens. With no group (or a group of one) every region is
// the identity and communicates nothing: one code path for every size.
//
// Every collective is counted per segment (embedding 0, block l + 1, head
// L + 1) in TpCommStats: the logical message bytes M and the bytes a rank
// sends on a ring, (M.22): all-reduce 2 (t-1)/t M, all-gather and
// reduce-scatter (t-1)/t M each.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/tensor.h"

namespace meshtrain::model {

enum class TpCollective : uint8_t { AllReduce, AllGather, ReduceScatter };
inline constexpr int kNumTpCollectives = 3;
const char* to_string(TpCollective c);

// What the regions moved, per segment and collective, since the last reset.
class TpCommStats {
 public:
  struct Entry {
    int64_t calls = 0;
    int64_t message_bytes = 0;  // M: all_reduce count, all_gather output, reduce_scatter input
    int64_t ring_bytes = 0;     // sent by this rank on a ring (docs/math.md (M.22))
    double seconds = 0;         // exposed: time a rank waited inside the collectives
    // In flight behind computation (issued early, finished before the wait
    // began: TpRegions::start_column_input_grad): not exposed.
    double overlapped_seconds = 0;
  };
  explicit TpCommStats(int num_segments = 0) : by_segment_(size_t(num_segments)) {}
  void add(int segment, TpCollective c, int64_t message_bytes, int group_size, double seconds,
           double overlapped_seconds = 0);
  void reset();
  int num_segments() const { return int(by_segment_.size()); }
  const Entry& at(int segment, TpCollective c) const { return by_segment_[size_t(segment)][size_t(c)]; }
  Entry segment_total(int segment) const;
  Entry total(TpCollective c) const;
  Entry total() const;

 private:
  std::vector<std::array<Entry, kNumTpCollectives>> by_segment_;
};

class TpRegions {
 public:
  TpRegions() = default;  // no tensor parallelism
  // group: null or size 1 for none. stats: null to count nothing.
  // canonical_blocks: reproducible mode's blocks (docs/math.md (M.73); 0:
  // off): the sums run in the fixed tree (tree_reduce.h), scratch
  // from `alloc`. overlap (parallel.tp_overlap): sums and gathers may run
  // behind other work (the start_* halves).
  TpRegions(comm::ProcessGroup* group, bool sequence_parallel, TpCommStats* stats, int segment,
            int canonical_blocks = 0, std::shared_ptr<CachingAllocator> alloc = nullptr, bool overlap = true);
  TpRegions for_segment(int segment) const {
    return TpRegions(group_, sequence_parallel_, stats_, segment, canonical_blocks_, alloc_, overlap_);
  }
  // The canonical blocks of every split sum (0: off), as the partition placed them.
  int canonical_blocks() const { return canonical_blocks_; }

  int size() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // True when this rank holds fewer rows of the stream than the tokens (SP over t > 1).
  bool shards_rows() const { return sequence_parallel_ && active(); }
  comm::ProcessGroup* group() const { return group_; }
  // Rows of the residual stream this rank holds for n tokens (n / t under
  // sequence parallelism: ConfigError when t does not divide n) and the
  // first of them.
  int64_t local_rows(int64_t n) const;
  int64_t first_row(int64_t n) const { return sequence_parallel_ ? rank() * local_rows(n) : 0; }

  // ---- the primitive halves (in place where the shapes allow) ----
  void all_reduce(const Tensor& t, comm::ReduceOp op = comm::ReduceOp::Sum) const;
  void all_gather_rows(const Tensor& shard, const Tensor& full) const;      // [n/t, d] -> [n, d]
  void reduce_scatter_rows(const Tensor& full, const Tensor& shard) const;  // [n, d] -> [n/t, d]

  // ---- what column- and row-parallel layers pass through ----
  // The input every column-parallel layer of a sublayer reads, from this
  // rank's rows: all-gathered under SP (a new tensor of category `cat`),
  // the tensor itself otherwise (copy-to-group).
  Tensor column_input(const Tensor& x_local, int64_t n, const std::shared_ptr<CachingAllocator>& alloc,
                      MemCategory cat) const;
  // The same with the all-gather left in flight where overlaps() (docs/math.md
  // (M.81)): rows is the [n, d] input, whose rows other than this rank's
  // (x_local, at first_row(n)) are written once finish() returns.
  struct PendingRows;
  PendingRows start_column_input(const Tensor& x_local, int64_t n, const std::shared_ptr<CachingAllocator>& alloc,
                                 MemCategory cat) const;
  // Its backward: the column-parallel layers' partial input gradient [n, d]
  // summed over the group; returns this rank's rows of it (reduce-scattered
  // under SP, all-reduced in place otherwise).
  Tensor column_input_grad(const Tensor& dx_partial, const std::shared_ptr<CachingAllocator>& alloc) const;
  // The same in two halves, so that work which does not read the sum (the
  // branch's weight gradients, block.cc) runs while it is in flight
  // (docs/math.md (M.78)). The sum is the same either way: the same collective on the
  // same buffers. It runs at once, blocking, where it cannot be started
  // early (overlaps() false).
  struct PendingRows {
    Tensor rows;  // this rank's rows of the sum, once finished
    TpCollective kind = TpCollective::AllReduce;
    struct Piece {
      comm::Work work;
      int64_t message_bytes = 0;
      Tensor input;  // alive until the piece's sum ended
    };
    std::vector<Piece> pieces;  // in flight; empty: already finished
  };
  PendingRows start_column_input_grad(const Tensor& dx_partial, const std::shared_ptr<CachingAllocator>& alloc) const;
  Tensor finish(PendingRows& pending) const;
  // row_output with the row-parallel GEMM in row pieces whose sums start as
  // each is written, so a piece's sum runs behind the next piece's GEMM
  // (docs/math.md (M.79)). project(out, first_row) writes rows [first_row,
  // first_row + out.dim(0)) of the [n, d] partial output into `out`.
  // finish() gives this rank's rows of the sum, as row_output does. With
  // overlaps() false: the whole output, then the blocking row_output.
  PendingRows start_row_output(int64_t n, int64_t d, DType dt, const std::shared_ptr<CachingAllocator>& alloc,
                               MemCategory cat,
                               const std::function<void(const Tensor& out, int64_t first_row)>& project) const;
  // Pieces of start_row_output: 4 of n rows; under sequence parallelism 2,
  // each of t GEMMs of n / 2t rows (more, smaller GEMMs measured slower:
  // docs/performance.md, "Overlap").
  int row_output_pieces() const { return sequence_parallel_ ? 2 : 4; }
  // True when the start_* halves leave their collectives in flight: a
  // group, parallel.tp_overlap on, and no canonical blocks (whose fixed tree
  // is a sequence of blocking steps).
  bool overlaps() const { return active() && overlap_ && canonical_blocks_ == 0; }
  // A row-parallel layer's partial output [n, d] summed over the group;
  // returns this rank's rows (reduce-scattered under SP, all-reduced in
  // place otherwise).
  Tensor row_output(const Tensor& partial, const std::shared_ptr<CachingAllocator>& alloc,
                    MemCategory cat = MemCategory::Workspace) const;
  // Its backward: the gradient of the whole output from this rank's rows
  // (all-gathered under SP into a tensor of category `cat`, the tensor
  // itself otherwise).
  Tensor row_output_grad(const Tensor& dy_local, int64_t n, const std::shared_ptr<CachingAllocator>& alloc,
                         MemCategory cat) const;
  // The same with the all-gather in flight, as start_column_input.
  PendingRows start_row_output_grad(const Tensor& dy_local, int64_t n, const std::shared_ptr<CachingAllocator>& alloc,
                                    MemCategory cat) const;

 private:
  bool active() const { return group_ && group_->size() > 1; }
  // The sum over the group of a partial [n, d] (copy-to-group backward and
  // reduce-from-group forward alike): in place, or this rank's rows in a
  // tensor of category `cat` under SP. in_flight: issue the collective and
  // return (overlaps() must hold); else finish it here.
  PendingRows start_sum(const Tensor& partial, const std::shared_ptr<CachingAllocator>& alloc, MemCategory cat,
                        bool in_flight) const;
  // The [n, d] rows of every rank from this rank's (gather-from-sequence
  // forward, scatter-to-sequence backward alike): all-gathered into a
  // tensor of category `cat` under SP, the rows themselves otherwise.
  PendingRows start_gather(const Tensor& local, int64_t n, const std::shared_ptr<CachingAllocator>& alloc,
                           MemCategory cat, bool in_flight) const;
  void count(TpCollective c, int64_t message_bytes, double seconds, double overlapped_seconds = 0) const;
  comm::ProcessGroup* group_ = nullptr;
  bool sequence_parallel_ = false;
  TpCommStats* stats_ = nullptr;
  int segment_ = 0;
  int canonical_blocks_ = 0;
  std::shared_ptr<CachingAllocator> alloc_;
  bool overlap_ = true;
};

}  // namespace meshtrain::model
