#include "meshtrain/model/canonical_attention.h"

#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/model/canonical_sum.h"
#include "meshtrain/model/ring_attention.h"
#include "meshtrain/model/tree_reduce.h"

namespace meshtrain::model {

namespace {

// The geometry of one call: P ranks of L pairs each, V = P L pairs, B rows
// of T = 2 V c positions; q rows of qrow elements per
// chunk of one row.
struct Pairs {
  int P, r;
  int64_t L, V, B, c, T, Hq, Hkv, D, qrow;
  const int32_t* chunk_segments;
  int64_t pseudo(int64_t j, int h, int64_t b) const { return (2 * j + h) * B + b; }
  int chunk(int64_t v, int h) const { return cp_chunk(int(V), int(v), h); }
  kernels::AttentionShape chunk_shape() const { return {B, c, Hq, Hkv, D}; }  // one chunk of the B rows
};

Pairs pairs_of(const ChunkPairs& p, const kernels::AttentionShape& s) {
  Pairs g{};
  g.P = p.cp ? p.cp->size() : 1;
  g.r = p.cp ? p.cp->rank() : 0;
  g.L = p.local_pairs;
  MT_CHECK(g.L >= 1 && s.batch % (2 * g.L) == 0, "chunk-pair attention: ", s.batch, " pseudo-rows for ", g.L,
           " pairs");
  g.V = g.L * g.P;
  g.B = s.batch / (2 * g.L);
  g.c = s.seq;
  g.T = 2 * g.V * g.c;
  g.Hq = s.q_heads;
  g.Hkv = s.kv_heads;
  g.D = s.head_dim;
  g.qrow = g.c * g.Hq * g.D;
  g.chunk_segments = p.chunk_segments;
  return g;
}

// Every pair's rows (pair-major, [V, 2, B, c, heads, D]) <-> position order
// [B, T, heads, D]; to_rows = false goes the other way.
void permute(const kernels::KernelTable& k, const Pairs& g, int64_t heads, const Tensor& pair_major,
             const Tensor& rows, bool to_rows) {
  const int64_t chunk = g.c * heads * g.D;
  for (int64_t v = 0; v < g.V; ++v)
    for (int h = 0; h < 2; ++h)
      for (int64_t b = 0; b < g.B; ++b) {
        const int64_t from = ((2 * v + h) * g.B + b) * chunk, to = (b * g.T + g.chunk(v, h) * g.c) * heads * g.D;
        const Tensor pm = pair_major.flat_slice(from, from + chunk), rw = rows.flat_slice(to, to + chunk);
        if (to_rows) k.copy(rw, pm);
        else k.copy(pm, rw);
      }
}

// This rank's K or V [2 B L, c, Hkv, D] as every row's positions in order.
Tensor rows_of_all(const kernels::KernelTable& k, const ChunkPairs& p, const Pairs& g, const Tensor& local,
                   const std::shared_ptr<CachingAllocator>& alloc) {
  Tensor all = local;
  if (g.P > 1) {
    all = Tensor::empty(Shape{local.numel() * g.P}, local.dtype(), alloc, MemCategory::Workspace);
    p.cp->all_gather(local.view(Shape{local.numel()}), all);
  }
  Tensor rows = Tensor::empty(Shape{g.B * g.T * g.Hkv * g.D}, local.dtype(), alloc, MemCategory::Workspace);
  permute(k, g, g.Hkv, all, rows, true);
  return rows;
}

// Document ids in position order [B, T] (empty: one document per row).
std::vector<int32_t> segments_in_order(const Pairs& g) {
  std::vector<int32_t> seg;
  if (!g.chunk_segments) return seg;
  seg.resize(size_t(g.B * g.T));
  for (int64_t i = 0; i < 2 * g.V; ++i)
    for (int64_t b = 0; b < g.B; ++b)
      std::copy(g.chunk_segments + (i * g.B + b) * g.c, g.chunk_segments + (i * g.B + b + 1) * g.c,
                seg.begin() + b * g.T + i * g.c);
  return seg;
}

// The spans of query chunk i of the B rows against their keys [0, (i + 1) c)
// (in rows of T positions); chunk i's document ids are [B, c] of the shard's.
struct ChunkSpans {
  kernels::AttentionSpan qs, ks;
};
ChunkSpans spans(const Pairs& g, const std::vector<int32_t>& seg, int i) {
  const bool docs = !seg.empty();
  return {{g.c, i * g.c, docs ? g.chunk_segments + i * g.B * g.c : nullptr},
          {(i + 1) * g.c, 0, docs ? seg.data() : nullptr, g.T}};
}

}  // namespace

void chunk_pair_attention_forward(const kernels::KernelTable& k, const ChunkPairs& p, const kernels::AttentionShape& s,
                                  const Tensor& q, const Tensor& kk, const Tensor& v, double scale, const Tensor& out,
                                  const Tensor& lse, const std::shared_ptr<CachingAllocator>& alloc) {
  const Pairs g = pairs_of(p, s);
  const Tensor K = rows_of_all(k, p, g, kk, alloc), Vr = rows_of_all(k, p, g, v, alloc);
  const std::vector<int32_t> seg = segments_in_order(g);
  const int64_t rows = g.B * g.Hq * g.c;
  Tensor buf = Tensor::empty(Shape{rows * (g.D + 2)}, q.dtype(), alloc, MemCategory::Workspace);
  const kernels::KernelTable::SoftmaxStateRef st{buf.flat_slice(0, rows * g.D),
                                                 buf.flat_slice(rows * g.D, rows * (g.D + 1)),
                                                 buf.flat_slice(rows * (g.D + 1), rows * (g.D + 2))};
  for (int64_t j = 0; j < g.L; ++j)
    for (int h = 0; h < 2; ++h) {
      const int i = g.chunk(g.r * g.L + j, h);
      const int64_t pr = g.pseudo(j, h, 0);
      const ChunkSpans sp = spans(g, seg, i);
      const auto rows_of = [&](const Tensor& t, int64_t per) { return t.flat_slice(pr * per, (pr + g.B) * per); };
      k.softmax_state_init(st);
      k.attention_partial_forward(g.chunk_shape(), rows_of(q, g.qrow), sp.qs, K, Vr, sp.ks, scale, st);
      k.softmax_state_finalize(g.chunk_shape(), g.c, st, rows_of(out, g.qrow), rows_of(lse, g.Hq * g.c));
    }
}

void chunk_pair_attention_backward(const kernels::KernelTable& k, const ChunkPairs& p,
                                   const kernels::AttentionShape& s, const Tensor& q, const Tensor& kk,
                                   const Tensor& v, double scale, const Tensor& out, const Tensor& lse,
                                   const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                   const std::shared_ptr<CachingAllocator>& alloc) {
  const Pairs g = pairs_of(p, s);
  const Tensor K = rows_of_all(k, p, g, kk, alloc), Vr = rows_of_all(k, p, g, v, alloc);
  const std::vector<int32_t> seg = segments_in_order(g);
  const int64_t heads = s.kv_grads_per_query ? g.Hq : g.Hkv;  // of dk and dv
  const int64_t n = g.B * g.T * heads * g.D;
  k.fill(dq, 0.0);
  // Every pair's dK and dV as a leaf of its own over the whole rows (its
  // two chunks, in chunk order), the pairs in the tree: one kernel call.
  std::vector<kernels::KernelTable::AttentionChunkRef> chunks;
  for (int64_t j = 0; j < g.L; ++j)
    for (int h = 0; h < 2; ++h) {
      const int i = g.chunk(g.r * g.L + j, h);
      const int64_t pr = g.pseudo(j, h, 0);
      const ChunkSpans sp = spans(g, seg, i);
      const auto qr = [&](const Tensor& t) { return t.flat_slice(pr * g.qrow, (pr + g.B) * g.qrow); };
      chunks.push_back({qr(q), sp.qs, sp.ks, qr(out), lse.flat_slice(pr * g.Hq * g.c, (pr + g.B) * g.Hq * g.c),
                        qr(dout), qr(dq), int(j)});
    }
  kernels::AttentionShape shape = g.chunk_shape();
  shape.kv_grads_per_query = s.kv_grads_per_query;
  const Tensor sum = Tensor::empty(Shape{2 * n}, q.dtype(), alloc, MemCategory::Workspace);  // dK then dV
  k.attention_chunk_tree_backward(shape, chunks, K, Vr, scale, sum.flat_slice(0, n), sum.flat_slice(n, 2 * n));
  if (g.P == 1) {
    permute(k, g, heads, dk, sum.flat_slice(0, n), false);
    permute(k, g, heads, dv, sum.flat_slice(n, 2 * n), false);
    return;
  }
  // The cp ranks' subtrees: the tree's top levels, each rank left its own pairs.
  for (int t = 0; t < 2; ++t) {
    const Tensor& mine = t == 0 ? dk : dv;
    Tensor all = Tensor::empty(Shape{n}, q.dtype(), alloc, MemCategory::Workspace);
    permute(k, g, heads, all, sum.flat_slice(t * n, (t + 1) * n), false);
    tree_reduce_scatter(*p.cp, all, alloc);
    k.copy(mine.view(Shape{mine.numel()}), all.flat_slice(g.r * mine.numel(), (g.r + 1) * mine.numel()));
  }
}

void sum_query_heads(const kernels::KernelTable& k, const Tensor& per_query, const Tensor& out, int64_t head_dim,
                     comm::ProcessGroup* share, const std::shared_ptr<CachingAllocator>& alloc) {
  const int64_t n = per_query.dim(0), q_heads = per_query.dim(1) / head_dim, kv_heads = out.dim(1) / head_dim;
  const int ranks = share ? share->size() : 1;
  MT_CHECK(ranks == 1 || kv_heads == 1, "a KV head shared by ", ranks, " ranks, ", kv_heads, " held");
  const int64_t per = q_heads / kv_heads, group = per * ranks;  // query heads per KV head: here, in all
  Tensor all = per_query;
  if (ranks > 1) {
    all = Tensor::empty(Shape{ranks * n, q_heads * head_dim}, per_query.dtype(), alloc, MemCategory::Workspace);
    share->all_gather(per_query, all);
  }
  const Tensor leaves = Tensor::empty(Shape{group * n, head_dim}, per_query.dtype(), alloc, MemCategory::Workspace);
  for (int64_t kh = 0; kh < kv_heads; ++kh) {
    BlockTree tree;
    for (int64_t i = 0; i < group; ++i) {  // query head kh * group + i of the model's (rank i / per's)
      const Tensor leaf = leaves.slice(i * n, (i + 1) * n);
      k.copy_columns(leaf, all.slice((i / per) * n, (i / per + 1) * n), (kh * per + i % per) * head_dim);
      tree.push(leaf);
    }
    k.put_columns(out, tree.fold(), kh * head_dim);
  }
}

}  // namespace meshtrain::model
