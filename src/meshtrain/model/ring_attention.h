// Context parallelism (docs/math.md, "Context parallelism"): attention across
// the ranks of the cp group, each holding a shard of every row's positions.
//
// Causal load balance: a row of T positions is cut into 2 cp chunks of
// c = T / (2 cp); rank r holds chunks r and 2 cp - 1 - r, so every rank has
// the same number of legal (query, key) chunk pairs (2 cp + 1, two of them
// diagonal). A rank's micro-batch of B rows is laid out as 2 B "pseudo-rows"
// of c positions: pseudo-rows [0, B) are chunk r of rows 0..B-1, [B, 2B)
// chunk 2 cp - 1 - r (TokenBatch rows = 2 B, seq = c). Everything outside
// attention works on tokens one by one and is unchanged; positions,
// segment ids and labels travel with their tokens.
//
// Ring attention: the K/V block of every rank (both its chunks) passes
// around the ring, the next block's non-blocking send/receive in flight
// while the current one is computed. Each query half folds the key chunks
// into its softmax state (online softmax, the fold of (M.49)) in
// ring order, fixed whatever the arrival timing; a key chunk after the query
// chunk is skipped as an explicit zero contribution (never computed, no
// inf - inf); inside a chunk pair, key tiles with no legal pair (document
// boundaries, segment ids per block) are skipped by the kernel.
// Backward: the K/V blocks travel again with a dK/dV accumulator: each rank
// adds its contribution (its queries against that block, from the saved
// out and log-sum-exp) to the partial sum received from its predecessor,
// in ring order, and after cp steps the sums reach their owners.
#pragma once

#include <memory>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/cpu/attention.h"

namespace meshtrain::model {

// Bytes the ring moved (sent by this rank) since the last reset.
struct CpCommStats {
  int64_t forward_bytes = 0;   // K/V: (cp - 1) hops of this rank's block per layer
  int64_t backward_bytes = 0;  // K/V again (cp - 1 hops) and dK/dV (cp hops)
  double exposed_s = 0;        // time waiting for a block after computing the previous one
  int64_t pairs_computed = 0;  // (query chunk, key chunk) pairs run through the kernel
  int64_t pairs_skipped = 0;   // pairs entirely after the diagonal: zero contribution
  void reset() { *this = CpCommStats{}; }
};

// The chunks rank r of a cp group holds: r and 2 cp - 1 - r.
inline int cp_chunk(int cp_size, int cp_rank, int half) { return half == 0 ? cp_rank : 2 * cp_size - 1 - cp_rank; }

// Legal (query, key) position pairs of rank r's queries over a causal row of
// `seq` positions (one document): its attention work, for the load balance.
int64_t cp_causal_pairs(int64_t seq, int cp_size, int cp_rank);

class RingAttention {
 public:
  RingAttention(comm::ProcessGroup* group, CpCommStats* stats) : group_(group), stats_(stats) {}
  int size() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  bool active() const { return size() > 1; }
  comm::ProcessGroup* group() const { return group_; }

  // s: the local pseudo-row shape (batch = 2 B, seq = c). chunk_segments:
  // the document ids of every chunk of the B rows, [2 cp, B, c] (null: one
  // document per row). q/out [2B, c, Hq, D], k/v [2B, c, Hkv, D], lse
  // [2B, Hq, c] as in attention_forward.
  void forward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
               const int32_t* chunk_segments, double scale, const Tensor& out, const Tensor& lse,
               const std::shared_ptr<CachingAllocator>& alloc) const;
  // Overwrites dq, dk, dv (this rank's positions), as attention_backward.
  void backward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                const int32_t* chunk_segments, double scale, const Tensor& out, const Tensor& lse,
                const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                const std::shared_ptr<CachingAllocator>& alloc) const;

 private:
  comm::ProcessGroup* group_;
  CpCommStats* stats_;
};

}  // namespace meshtrain::model
