// Reproducible mode's attention over canonical chunk pairs (docs/math.md
// (M.74)), on every layout the same arithmetic: a row of T positions is 2 V
// chunks of c, a rank holds pairs (chunks v and 2 V - 1 - v) of the rows
// (train/context_shard.h), V / cp of them under context parallelism.
//
// Forward: the cp group all-gathers K/V and puts them in position order;
// query chunk i of the micro-batch's B rows runs one span call against the
// keys [0, (i + 1) c) of each row (a key span with a row stride; the
// kernel's own tiles, the same call on every layout), from a fresh softmax
// state.
// Backward: dq as that call; dK/dV of each pair of queries (its two chunks,
// in chunk order) a leaf of its own over the whole row (one kernel call,
// KernelTable::attention_chunk_tree_backward, which sums each key tile's
// leaves in cache), the pairs
// summed in the block tree (canonical_sum.h) and the cp ranks' subtrees by
// a tree reduce-scatter, which leaves each rank its own pairs' dK/dV: the
// tree one rank builds over all V pairs.
#pragma once

#include <memory>

#include "meshtrain/comm/process_group.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::model {

struct ChunkPairs {
  comm::ProcessGroup* cp = nullptr;  // null: one rank holds every pair
  int64_t local_pairs = 1;           // the micro-batch's token_blocks
  const int32_t* chunk_segments = nullptr;  // [2 V, B, c] or null
};

// s: the local pseudo-row shape (batch 2 B local_pairs, seq c); q/out
// [2 B P, c, Hq, D], k/v [.., Hkv, D], lse [2 B P, Hq, c].
void chunk_pair_attention_forward(const kernels::KernelTable& k, const ChunkPairs& p, const kernels::AttentionShape& s,
                                  const Tensor& q, const Tensor& kk, const Tensor& v, double scale, const Tensor& out,
                                  const Tensor& lse, const std::shared_ptr<CachingAllocator>& alloc);
// Overwrites dq, dk, dv (this rank's positions; dk, dv [.., Hq, D] per
// query head where s.kv_grads_per_query).
void chunk_pair_attention_backward(const kernels::KernelTable& k, const ChunkPairs& p,
                                   const kernels::AttentionShape& s, const Tensor& q, const Tensor& kk,
                                   const Tensor& v, double scale, const Tensor& out, const Tensor& lse,
                                   const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                   const std::shared_ptr<CachingAllocator>& alloc);

// Grouped-query attention in reproducible mode (docs/math.md (M.76)): the
// backward keeps each query head's dK/dV apart (kv_grads_per_query), and a
// KV head's dK/dV is the tree (M.10) over its query heads' parts in head
// order, any number of them (BlockTree::fold) — on every layout, a KV head
// shared by several tp ranks included.
// out [n, Hkv D] = each KV head's tree over its query heads' parts
// per_query [n, Hq D] (overwrites). share: the tp ranks sharing this rank's
// one KV head, each holding its own query heads' parts in rank order (null
// or size 1: whole groups here); the parts are all-gathered over it.
void sum_query_heads(const kernels::KernelTable& k, const Tensor& per_query, const Tensor& out, int64_t head_dim,
                     comm::ProcessGroup* share, const std::shared_ptr<CachingAllocator>& alloc);

}  // namespace meshtrain::model
