// Causal attention on CPU: flash-style tiles with online softmax, GQA, packed
// documents, and the softmax-state pieces context parallelism merges.
//   q, out, dq    [B, Tq, Hq, D]     row stride Hq * D
//   k, v, dk, dv  [B, Tk, Hkv, D]    row stride Hkv * D; query head h reads kv head h / (Hq / Hkv)
//   seg           [B, T] int32 document ids (per span)
//   lse           [B, Hq, Tq]
//   state         o [B, Hq, Tq, D], a and l [B, Hq, Tq]
// Tiles are kBq queries x kBk keys; only the S/P tile (kBq x kBk) and one
// transposed K (and V) tile live in per-thread scratch, never T x T.
#include "meshtrain/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/subtree_counter.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/attention_tiles.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"
#include "meshtrain/kernels/cpu/per_isa/tree_add.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

using namespace attention_detail;

// ---------------------------------------------------------------------------
template <typename T>
void softmax_state_init(SoftmaxState<T> st, int64_t rows, int64_t head_dim) {
  std::fill(st.a, st.a + rows, kNegInf<T>);
  std::fill(st.l, st.l + rows, T(0));
  std::fill(st.o, st.o + rows * head_dim, T(0));
}

// docs/math.md (M.49): a = max(a1, a2), l = e^{a1-a} l1 + e^{a2-a} l2; o likewise.
// A fully masked side (a = -inf) gets weight exactly 0 instead of e^{-inf - (-inf)}.
template <typename T>
void softmax_state_merge(SoftmaxState<T> into, const SoftmaxState<T>& other, int64_t rows, int64_t head_dim) {
  parallel_range(rows, rows * head_dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T a1 = into.a[r], a2 = other.a[r];
      if (a2 == kNegInf<T>) continue;  // other contributes nothing
      T* o1 = into.o + r * head_dim;
      const T* o2 = other.o + r * head_dim;
      if (a1 == kNegInf<T>) {  // into is empty: take other as is
        into.a[r] = a2;
        into.l[r] = other.l[r];
        std::copy(o2, o2 + head_dim, o1);
        continue;
      }
      const T a = std::max(a1, a2);
      const T w1 = std::exp(a1 - a), w2 = std::exp(a2 - a);
      into.a[r] = a;
      into.l[r] = w1 * into.l[r] + w2 * other.l[r];
#pragma omp simd
      for (int64_t d = 0; d < head_dim; ++d) o1[d] = w1 * o1[d] + w2 * o2[d];
    }
  });
}

template <typename T>
void softmax_state_finalize(const AttentionShape& s, int64_t qs_len, const SoftmaxState<T>& st, T* out, T* lse) {
  check_shape(s);
  const int64_t H = s.q_heads, D = s.head_dim;
  // Rows (b, h, t) in the state's order: every (b, h) is qs_len consecutive rows.
  parallel_range(s.batch * H * qs_len, s.batch * H * qs_len * D, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % qs_len, bh = r / qs_len, h = bh % H, b = bh / H;
      T* y = out + ((b * qs_len + t) * H + h) * D;
      const T l = st.l[r];
      const T inv = l > T(0) ? T(1) / l : T(0);
      const T* o = st.o + r * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) y[d] = o[d] * inv;
      lse[r] = l > T(0) ? st.a[r] + std::log(l) : kNegInf<T>;
    }
  });
}

template <typename T>
void attention_partial_forward(const AttentionShape& s, const T* q, AttentionSpan qs, const T* k, const T* v,
                               AttentionSpan ks, T scale, SoftmaxState<T> state) {
  check_shape(s);
  check_spans(qs, ks);
  const int64_t H = s.q_heads, D = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t ntiles = (qs.len + kBq - 1) / kBq;
  const bool par = attention_macs(s, qs.len, ks.len) > kParallelMacs;
  run_pieces_if(par, s.batch * H * ntiles, [&](int64_t tile, int) {  // (b, h, query tile)
    const int64_t it = tile % ntiles, h = tile / ntiles % H, b = tile / ntiles / H;
    const int64_t r0 = (b * H + h) * qs.len + it * kBq;
    fold_query_tile(D, query_tile(s, q, qs, b, h, it * kBq), key_range(s, k, v, ks, b, h / group), scale,
                    state.o + r0 * D, state.a + r0, state.l + r0);
  });
}

template <typename T, typename In>
void attention_forward(const AttentionShape& s, const In* q, const In* k, const In* v, const int32_t* seg, T scale,
                       In* out, T* lse) {
  check_shape(s);
  const AttentionSpan sp{s.seq, 0, seg};
  const int64_t H = s.q_heads, D = s.head_dim, T_ = s.seq, group = s.q_heads / s.kv_heads;
  const int64_t ntiles = (T_ + kBq - 1) / kBq;
  const bool par = attention_macs(s, T_, T_) / 2 > kParallelMacs;
  run_pieces_if(par, s.batch * H * ntiles, [&](int64_t tile, int) {  // (b, h, query tile)
    const int64_t it = tile % ntiles, h = tile / ntiles % H, b = tile / ntiles / H;
    const QueryTile<In> qt = query_tile(s, q, sp, b, h, it * kBq);
    // The output rows are written after the fold, the next tile's query rows
    // read at its start: both are 2 KiB-strided rows outside the cache,
    // fetched now so the fold hides the wait.
    In* const out_tile = out + ((b * T_ + it * kBq) * H + h) * D;  // its first row; rows H * D apart
    prefetch_rows(out_tile, H * D, qt.nq, D, true);
    if (it + 1 < ntiles)
      prefetch_rows(qt.q + int64_t(kBq) * qt.ldq, qt.ldq, std::min<int64_t>(kBq, T_ - (it + 1) * kBq), D, false);
    // Per-thread state for this tile; fold_query_tile's scratch sits in another buffer.
    thread_local std::vector<T> state_buf;
    if (state_buf.size() < static_cast<size_t>(kBq * (D + 2))) state_buf.resize(kBq * (D + 2));
    T* o = state_buf.data();
    T* a = o + kBq * D;
    T* l = a + kBq;
    MT_ISA_NS::softmax_state_init(SoftmaxState<T>{o, a, l}, qt.nq, D);
    fold_query_tile(D, qt, key_range(s, k, v, sp, b, h / group), scale, o, a, l);
    for (int i = 0; i < qt.nq; ++i) {
      In* y = out_tile + i * H * D;
      const T inv = l[i] > T(0) ? T(1) / l[i] : T(0);
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) store_out(y + d, o[i * D + d] * inv);
      lse[(b * H + h) * T_ + it * kBq + i] = l[i] > T(0) ? a[i] + std::log(l[i]) : kNegInf<T>;
    }
  });
}

// FlashAttention-2 style backward. One task per (batch row, kv head) owns dk,
// dv of that head and dq of its query heads, so nothing is shared between
// threads; P is recomputed from lse and D_i = rowsum(dout_i * out_i).
//
// K, Q and dO tiles are GEMM operands read row by row: packed into
// contiguous [rows, D] first (their rows are 1-2 KiB apart and would alias
// in a few L1 sets), like kt and vt, the transposed K and V. Q and dO of
// the kv group are packed once per span of queries (a query tile meets
// every key tile before it); a span's packed Q and dO fit in
// kPackedGroupBytes, so the thread's scratch stays bounded whatever the
// sequence. Sums keep their order within a span: dq over key tiles, dk and
// dv over (query head, query tile); spans add to dk and dv one after the
// other, and a sequence of one span has the bits of a whole-group pack.
// Several chunks of queries against one K and V (reproducible mode's chunk
// pairs, docs/math.md (M.74)) run as one call: their spans, in batches
// that fit kPackedGroupBytes, meet each key tile packed once, and each
// key tile's pair leaves are summed in the tree in the thread's cache.
constexpr size_t kPackedGroupBytes = size_t(1) << 20;

// Q and dO of query head h, query rows [s0, s0 + span) of batch row b,
// packed into qp and dop ([span, D] each), and their
// D_i = rowsum(dO_i * O_i) into delta ([span]).
template <typename T, typename In>
void pack_query_span(const AttentionShape& s, int64_t qs_len, const In* q, const In* out, const T* dout, int64_t b,
                     int64_t h, int64_t s0, int64_t span, T* qp, T* dop, T* delta) {
  const int64_t D = s.head_dim, ldq = s.q_heads * D;
  const int64_t first_row = (b * qs_len + s0) * ldq + h * D;
  pack_rows(q + first_row, ldq, static_cast<int>(span), D, qp);
  pack_rows(dout + first_row, ldq, static_cast<int>(span), D, dop);
  // dO from its packed copy (just written, in cache); O's strided rows asked
  // for ahead, as pack_rows does.
  // A bf16 O row is widened first, so the reduction (whose association the
  // compiler picks) is the f32 one on the same values.
  thread_local std::vector<T> widened;
  if constexpr (!std::is_same_v<T, In>) widened.resize(static_cast<size_t>(D));
  for (int64_t t = 0; t < span; ++t) {
    const In* orow = out + first_row + t * ldq;
    if (t + kRowsAhead < span) prefetch_rows(orow + kRowsAhead * ldq, ldq, 1, D, false);
    const T* o = nullptr;
    if constexpr (std::is_same_v<T, In>) {
      o = orow;
    } else {
      widen_row(orow, D, widened.data());
      o = widened.data();
    }
    const T* dot = dop + t * D;
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t d = 0; d < D; ++d) acc += dot[d] * o[d];
    delta[t] = acc;
  }
}

// A task's per-thread buffers: the current key tile's operands (K^T and V^T
// [D, kBk], K packed [nk, D]), shared by the kv group's query tiles, and
// the P and dS tiles [kBq, kBk].
template <typename T>
struct BackwardTiles {
  T* kt;
  T* vt;
  T* kp;
  T* P;
  T* dS;
};

// The backward of one (query tile, key tile) pair: P recomputed from lse,
// then dV += P^T dO, dS = scale * P * (dO V^T - D_i), dQ += dS K, dK += dS^T Q.
// qtile and dotile are the packed Q and dO rows [nq, D]; lse_row and
// delta_row the tile's rows of lse and D_i; dq (ldq), dk and dv (ldk) point
// at the tile's first row.
template <typename T>
void backward_tile(int64_t D, const TileGeom& geo, TileKind kind, const BackwardTiles<T>& t, const T* qtile,
                   const T* dotile, const T* lse_row, const T* delta_row, T scale, T* dq, int64_t ldq, T* dk, T* dv,
                   int64_t ldk) {
  const int nq = geo.nq, nk = geo.nk, Di = static_cast<int>(D);
  // Query i sees key j when j < i + below, i.e. i >= j - below + 1 (causality).
  const int64_t below = geo.qp0 - geo.kp0 + 1;
  const CausalTrim keys_below{CausalTrim::kColsBelow, below}, k_keys_below{CausalTrim::kKBelow, below},
      queries_from{CausalTrim::kKFrom, 1 - below};
  tile_gemm<T>(nq, nk, Di, qtile, D, 1, t.kt, kBk, t.P, kBk, false, keys_below);
  scale_and_mask(t.P, geo, kind, scale);
  for (int i = 0; i < nq; ++i) {
    T* p = t.P + i * kBk;
    if (lse_row[i] == kNegInf<T>) {  // row without a legal key: no gradient
      std::fill(p, p + nk, T(0));
      continue;
    }
    exp_row(p, nk, lse_row[i]);
  }
  // dV += P^T dO
  tile_gemm<T>(nk, Di, nq, t.P, 1, kBk, dotile, D, dv, ldk, true, queries_from);
  // dP = dO V^T; dS = scale * P * (dP - D_i), exactly 0 where P is
  // (dP is not computed for every masked pair)
  tile_gemm<T>(nq, nk, Di, dotile, D, 1, t.vt, kBk, t.dS, kBk, false, keys_below);
  for (int i = 0; i < nq; ++i) {
    const T di = delta_row[i];
    T* ds = t.dS + i * kBk;
    const T* p = t.P + i * kBk;
#pragma omp simd
    for (int j = 0; j < nk; ++j) ds[j] = p[j] == T(0) ? T(0) : scale * p[j] * (ds[j] - di);
  }
  // dQ += dS K; dK += dS^T Q
  tile_gemm<T>(nq, Di, nk, t.dS, kBk, 1, t.kp, D, dq, ldq, true, k_keys_below);
  tile_gemm<T>(nk, Di, nq, t.dS, 1, kBk, qtile, D, dk, ldk, true, queries_from);
}

// One span of queries of one chunk: its rows [s0, s0 + span) packed at
// `at` rows of a batch's packed [group, rows] Q and dO (each query head's
// rows at g * rows).
struct SpanUnit {
  int chunk;
  int64_t s0, span, at;
};

// The chunks' query spans cut to at most span_rows each, in order, then
// in batches of at most span_rows rows.
std::vector<std::vector<SpanUnit>> span_batches(const int64_t* lens, int count, int64_t span_rows) {
  std::vector<std::vector<SpanUnit>> batches;
  int64_t rows = span_rows;  // of the open batch (full: open a new one)
  for (int c = 0; c < count; ++c)
    for (int64_t s0 = 0; s0 < lens[c]; s0 += span_rows) {
      const int64_t span = std::min(span_rows, lens[c] - s0);
      if (rows + span > span_rows) batches.emplace_back(), rows = 0;
      batches.back().push_back({c, s0, span, rows});
      rows += span;
    }
  return batches;
}

// Every chunk's keys come from one K and V in the same rows: their key
// spans differ in length only, and only where rows have a stride.
template <typename T, typename In>
void check_chunks(const AttentionChunk<T, In>* chunks, int count) {
  for (int c = 0; c < count; ++c) {
    const AttentionSpan &ks = chunks[c].ks, &first = chunks[0].ks;
    check_spans(chunks[c].qs, ks);
    MT_CHECK(ks.pos0 == first.pos0 && ks.seg == first.seg && ks.row_stride == first.row_stride &&
                 (ks.row_stride != 0 || ks.len == first.len),
             "attention chunks: key spans of other rows or positions");
  }
}

// The one backward over chunks of queries (attention_partial_backward: one
// chunk, adding to its dk, dv; attention_chunk_tree_backward: tree_dk,
// tree_dv = the tree over the chunks' leaves, each key tile's leaves
// summed in the thread's cache).
template <typename T, typename In>
void chunks_backward(const AttentionShape& s, const AttentionChunk<T, In>* chunks, int count, const In* k,
                     const In* v, T scale, T* tree_dk, T* tree_dv) {
  check_shape(s);
  check_chunks(chunks, count);
  if (count == 0) return;
  const bool tree = tree_dk != nullptr;
  const int64_t H = s.q_heads, Hk = s.kv_heads, D = s.head_dim, group = H / Hk;
  const int64_t ldq = H * D;
  const int64_t span_rows = std::max<int64_t>(
      kBq, static_cast<int64_t>(kPackedGroupBytes / (2 * sizeof(T) * size_t(group * D))) / kBq * kBq);
  std::vector<int64_t> lens;
  int64_t key_len = 0;
  double macs = 0;
  for (int c = 0; c < count; ++c) {
    lens.push_back(chunks[c].qs.len);
    key_len = std::max(key_len, chunks[c].ks.len);
    macs += attention_macs(s, chunks[c].qs.len, chunks[c].ks.len);
    MT_CHECK(!tree || (c == 0 ? chunks[c].leaf == 0
                              : chunks[c].leaf == chunks[c - 1].leaf || chunks[c].leaf == chunks[c - 1].leaf + 1),
             "attention chunk tree: leaves must be runs of chunks numbered from 0");
  }
  const int leaves = chunks[count - 1].leaf + 1;
  // A key row of the tree's output: every chunk's rows, one stride apart.
  const int64_t key_row = chunks[0].ks.row_stride ? chunks[0].ks.row_stride : chunks[0].ks.len;
  const std::vector<std::vector<SpanUnit>> batches = span_batches(lens.data(), count, span_rows);
  int64_t batch_rows = 0;
  for (const auto& batch : batches) batch_rows = std::max(batch_rows, batch.back().at + batch.back().span);
  const size_t tile_elems = static_cast<size_t>(D) * kBk;
  const size_t group_elems = static_cast<size_t>(group * batch_rows * D);
  // A leaf of one key tile: its dK then its dV, kBk rows of the task's heads' columns.
  const int64_t width = (s.kv_grads_per_query ? group : 1) * D, leaf_elems = 2 * kBk * width;
  int64_t depth = 1;
  while ((int64_t(1) << depth) <= leaves) ++depth;
  const size_t tree_elems = tree ? static_cast<size_t>((depth + 1) * leaf_elems) : 0;
  run_pieces_if(macs > kParallelMacs, s.batch * Hk, [&](int64_t task, int) {  // (b, kv head): its dk, dv, dq rows
    const int64_t b = task / Hk, hk = task % Hk;
    T* const scratch =
        thread_scratch<T>(3 * tile_elems + 2 * group_elems + 2 * kBq * kBk + group * batch_rows + tree_elems);
    T* const qp = scratch + 3 * tile_elems;  // [group, rows, D]
    T* const dop = qp + group_elems;
    T* const P = dop + group_elems;
    T* const delta = P + 2 * kBq * kBk;  // [group, rows]
    T* const levels = delta + group * batch_rows;  // the tree's subtrees, leaf_elems each
    const BackwardTiles<T> tiles{scratch, scratch + tile_elems, scratch + 2 * tile_elems, P, P + kBq * kBk};
    const KeyRange<In> kr = key_range(s, k, v, chunks[0].ks, b, hk);
    // Where query head h's dk/dv rows start: its KV head's, or its own.
    const int64_t ld_grad = s.kv_grads_per_query ? ldq : kr.ldk;
    auto grads_at = [&](const AttentionChunk<T, In>& c, int64_t h) {
      if (!s.kv_grads_per_query) return kr.k - k;
      return b * (c.ks.row_stride ? c.ks.row_stride : c.ks.len) * ldq + h * D;
    };
    auto pack_batch = [&](const std::vector<SpanUnit>& batch) {  // span u at rows [at, at + span) of each head
      const int64_t rows = batch.back().at + batch.back().span;
      for (const SpanUnit& u : batch) {
        const AttentionChunk<T, In>& c = chunks[u.chunk];
        for (int64_t g = 0; g < group; ++g) {
          const int64_t row = g * rows + u.at;
          pack_query_span(s, c.qs.len, c.q, c.out, c.dout, b, hk * group + g, u.s0, u.span, qp + row * D,
                          dop + row * D, delta + row);
        }
      }
    };
    int nk_packed = 0;  // of the key tile j0 packed now
    // Span u's tiles against key tile j0; query head h's dk, dv of the tile
    // at grad(h) (its first row), ld apart.
    auto run_unit = [&](const SpanUnit& u, int64_t rows, int64_t j0, auto&& grad, int64_t ld) {
      const AttentionChunk<T, In>& c = chunks[u.chunk];
      const int64_t kp0 = chunks[0].ks.pos0 + j0;
      if (j0 >= c.ks.len || kp0 > c.qs.pos0 + u.s0 + u.span - 1) return;  // no query of the span sees them
      const int nk = static_cast<int>(std::min<int64_t>(kBk, c.ks.len - j0));
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = hk * group + g;
        // First query tile of the span that can see key tile j0.
        const int64_t first = std::max<int64_t>(u.s0, (kp0 - c.qs.pos0) / kBq * kBq);
        for (int64_t i0 = first; i0 < u.s0 + u.span; i0 += kBq) {
          const QueryTile<In> qt = query_tile(s, c.q, c.qs, b, h, i0);
          const TileGeom geo{qt.qp0, qt.nq, qt.qseg, kp0, nk, kr.kseg ? kr.kseg + j0 : nullptr};
          const TileKind kind = classify(geo);
          if (kind == TileKind::kSkip) continue;
          if (nk_packed < nk) {  // the longest key tile of the chunks here, once
            const int n = static_cast<int>(std::min<int64_t>(kBk, key_len - j0));
            transpose_rows(kr.k + j0 * kr.ldk, kr.ldk, n, D, tiles.kt, kBk);
            transpose_rows(kr.v + j0 * kr.ldk, kr.ldk, n, D, tiles.vt, kBk);
            pack_rows(kr.k + j0 * kr.ldk, kr.ldk, n, D, tiles.kp);
            nk_packed = n;
          }
          const int64_t row = g * rows + u.at + i0 - u.s0;  // in the batch's packed [group, rows]
          const auto [dk_at, dv_at] = grad(c, h);
          backward_tile(D, geo, kind, tiles, qp + row * D, dop + row * D, c.lse + (b * H + h) * c.qs.len + i0,
                        delta + row, scale, c.dq + (qt.q - c.q), ldq, dk_at, dv_at, ld);
        }
      }
    };
    // A batch's spans meet each key tile in order (packed once for all of
    // them): an element of dk, dv gets the chunks' terms in chunk order,
    // each chunk's over (query head, query tile), and dq's rows theirs
    // over key tiles in order, as one call per chunk and span would.
    if (!tree) {
      for (const std::vector<SpanUnit>& batch : batches) {
        pack_batch(batch);
        const int64_t rows = batch.back().at + batch.back().span;
        for (int64_t j0 = 0; j0 < key_len; j0 += kBk) {
          nk_packed = 0;
          for (const SpanUnit& u : batch)
            run_unit(u, rows, j0, [&](const AttentionChunk<T, In>& c, int64_t h) {
              const int64_t at = grads_at(c, h) + j0 * ld_grad;
              return std::pair<T*, T*>{c.dk + at, c.dv + at};
            }, ld_grad);
        }
      }
      return;
    }
    // The tree: per key tile, each leaf (0 + its chunks' terms, in order)
    // in a buffer of its own, added as core/subtree_counter.h says (as
    // BlockTree adds tensors), the root written once; a tile no
    // query sees is a tree of zeros. Several batches re-pack their spans
    // at every key tile.
    const int64_t out_ld = (s.kv_grads_per_query ? H : Hk) * D, out_col = hk * width;
    if (batches.size() == 1) pack_batch(batches[0]);
    SubtreeCounter tree;  // subtree i in levels + i * leaf_elems
    for (int64_t j0 = 0; j0 < key_row; j0 += kBk) {
      const int64_t nk_tile = std::min<int64_t>(kBk, key_row - j0), used = nk_tile * width;
      nk_packed = 0;
      tree.clear();
      auto slot = [&](size_t i) { return levels + int64_t(i) * leaf_elems; };
      auto add = [&](size_t left, size_t right) {  // dK and dV halves
        add_values(slot(left), slot(right), used);
        add_values(slot(left) + kBk * width, slot(right) + kBk * width, used);
      };
      int open = -1;  // the leaf being written, in slot(tree.size())
      for (const std::vector<SpanUnit>& batch : batches) {
        if (batches.size() > 1) pack_batch(batch);
        const int64_t rows = batch.back().at + batch.back().span;
        for (const SpanUnit& u : batch) {
          if (chunks[u.chunk].leaf != open) {  // leaves are runs numbered in order: the next one
            if (open >= 0) tree.push(add);
            open = chunks[u.chunk].leaf;
            std::fill(slot(tree.size()), slot(tree.size()) + used, T(0));
            std::fill(slot(tree.size()) + kBk * width, slot(tree.size()) + kBk * width + used, T(0));
          }
          T* const leaf = slot(tree.size());
          run_unit(u, rows, j0, [&](const AttentionChunk<T, In>&, int64_t h) {
            const int64_t col = s.kv_grads_per_query ? (h - hk * group) * D : 0;
            return std::pair<T*, T*>{leaf + col, leaf + kBk * width + col};
          }, width);
        }
      }
      tree.push(add);
      tree.fold(add);
      for (int64_t r = 0; r < nk_tile; ++r) {
        const int64_t at = (b * key_row + j0 + r) * out_ld + out_col;
        std::memcpy(tree_dk + at, levels + r * width, size_t(width) * sizeof(T));
        std::memcpy(tree_dv + at, levels + kBk * width + r * width, size_t(width) * sizeof(T));
      }
    }
  });
}

template <typename T>
void attention_chunk_tree_backward(const AttentionShape& s, const AttentionChunk<T>* chunks, int count, const T* k,
                                   const T* v, T scale, T* dk, T* dv) {
  MT_CHECK(count > 0 && dk && dv, "attention chunk tree: no chunks or no output");
  chunks_backward(s, chunks, count, k, v, scale, dk, dv);
}

template <typename T>
void attention_partial_backward(const AttentionShape& s, const T* q, AttentionSpan qs, const T* k, const T* v,
                                AttentionSpan ks, T scale, const T* out, const T* lse, const T* dout, T* dq, T* dk,
                                T* dv) {
  const AttentionChunk<T> chunk{q, qs, ks, out, lse, dout, dq, dk, dv, 0};
  chunks_backward<T>(s, &chunk, 1, k, v, scale, nullptr, nullptr);
}

template <typename T, typename In>
void attention_backward(const AttentionShape& s, const In* q, const In* k, const In* v, const int32_t* seg, T scale,
                        const In* out, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  check_shape(s);
  MT_CHECK(!s.kv_grads_per_query, "attention_backward: per-query-head KV gradients are the partial backward's");
  const int64_t nq = s.batch * s.seq * s.q_heads * s.head_dim;
  const int64_t nk = s.batch * s.seq * s.kv_heads * s.head_dim;
  parallel_zero_bytes(dq, sizeof(T) * nq);
  parallel_zero_bytes(dk, sizeof(T) * nk);
  parallel_zero_bytes(dv, sizeof(T) * nk);
  const AttentionSpan sp{s.seq, 0, seg};
  const AttentionChunk<T, In> chunk{q, sp, sp, out, lse, dout, dq, dk, dv, 0};
  chunks_backward<T, In>(s, &chunk, 1, k, v, scale, nullptr, nullptr);
}

MT_INSTANTIATE_ATTENTION(float, uint16_t)
#define MT_ATTENTION_INSTANTIATE(T)                                                                                 \
  MT_INSTANTIATE_ATTENTION(T, T)                                                                                   \
  template void softmax_state_merge<T>(SoftmaxState<T>, const SoftmaxState<T>&, int64_t, int64_t);                 \
  template void softmax_state_init<T>(SoftmaxState<T>, int64_t, int64_t);                                          \
  template void softmax_state_finalize<T>(const AttentionShape&, int64_t, const SoftmaxState<T>&, T*, T*);         \
  template void attention_partial_forward<T>(const AttentionShape&, const T*, AttentionSpan, const T*, const T*,   \
                                             AttentionSpan, T, SoftmaxState<T>);                                   \
  template void attention_partial_backward<T>(const AttentionShape&, const T*, AttentionSpan, const T*, const T*,  \
                                              AttentionSpan, T, const T*, const T*, const T*, T*, T*, T*);        \
  template void attention_chunk_tree_backward<T>(const AttentionShape&, const AttentionChunk<T>*, int, const T*,  \
                                                 const T*, T, T*, T*);

MT_PER_ISA_INSTANTIATE(MT_ATTENTION_INSTANTIATE)
#undef MT_ATTENTION_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
