#include "meshtrain/model/ring_attention.h"

#include <chrono>
#include <utility>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::model {

namespace {

using Clock = std::chrono::steady_clock;
// The ring is the only point-to-point traffic on the cp group.
constexpr int kTagK = 0, kTagV = 1, kTagDk = 2, kTagDv = 3;

int64_t pairs_of_chunks(int64_t c, int qi, int ki) {
  if (ki > qi) return 0;
  return ki < qi ? c * c : c * (c + 1) / 2;
}

// The ring geometry of one call: B real rows, chunks of c positions, the
// element counts of a half (one chunk of the B rows) of each array.
struct Ring {
  int P, r;
  int64_t B, c, q_half, kv_half, lse_half;
  kernels::AttentionShape shape;  // per half: batch B (seq is ignored by the span kernels)
  const int32_t* seg;
  int next() const { return (r + 1) % P; }
  int prev() const { return (r + P - 1) % P; }
  int src(int step) const { return (r - step % P + P) % P; }  // whose block this rank holds at `step`
  kernels::AttentionSpan span(int chunk) const { return {c, int64_t(chunk) * c, seg ? seg + chunk * B * c : nullptr}; }
};

Ring ring_of(const kernels::AttentionShape& s, const comm::ProcessGroup& g, const int32_t* seg) {
  MT_CHECK(s.batch % 2 == 0, "context parallel attention: ", s.batch, " pseudo-rows, expected 2 per row");
  Ring R{g.size(), g.rank(), s.batch / 2, s.seq, 0, 0, 0, {}, seg};
  R.q_half = R.B * R.c * s.q_heads * s.head_dim;
  R.kv_half = R.B * R.c * s.kv_heads * s.head_dim;
  R.lse_half = R.B * s.q_heads * R.c;
  R.shape = {R.B, R.c, s.q_heads, s.kv_heads, s.head_dim};
  return R;
}

// The K and V of one block (both chunks), sent or received as two messages:
// flat views of 2 * kv_half elements each.
struct KvBlock {
  Tensor k, v;
};

// Block i of a [2, 2, n] buffer (K then V of n elements each).
KvBlock block_in(const Tensor& t, int i) {
  const int64_t n = t.dim(2);
  return {t.flat_slice(2 * i * n, (2 * i + 1) * n), t.flat_slice((2 * i + 1) * n, (2 * i + 2) * n)};
}

Tensor half_of(const Tensor& t, int64_t half, int h) { return t.flat_slice(h * half, (h + 1) * half); }

std::vector<comm::Work> pass_on(comm::ProcessGroup& g, const Ring& R, const KvBlock& send, const KvBlock& recv,
                                int tag_k, int tag_v) {
  std::vector<comm::Work> w;
  w.push_back(g.irecv(recv.k.raw(), size_t(recv.k.numel()), recv.k.dtype(), R.prev(), {.tag = tag_k}));
  w.push_back(g.irecv(recv.v.raw(), size_t(recv.v.numel()), recv.v.dtype(), R.prev(), {.tag = tag_v}));
  w.push_back(g.isend(send.k.raw(), size_t(send.k.numel()), send.k.dtype(), R.next(), {.tag = tag_k}));
  w.push_back(g.isend(send.v.raw(), size_t(send.v.numel()), send.v.dtype(), R.next(), {.tag = tag_v}));
  return w;
}

double wait_all(std::vector<comm::Work>& works) {
  const auto t0 = Clock::now();
  for (comm::Work& w : works) w.wait();
  works.clear();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void ring_forward(const kernels::KernelTable& kt, comm::ProcessGroup& g, const Ring& R, const Tensor& q,
                  const Tensor& k, const Tensor& v, double scale, const Tensor& out, const Tensor& lse,
                  const std::shared_ptr<CachingAllocator>& alloc, CpCommStats* stats) {
  const DType dt = q.dtype();
  const int64_t D = R.shape.head_dim, rows = R.B * R.shape.q_heads * R.c;
  // Softmax states of the two query halves (in the accumulate type: never 16 bits).
  Tensor o = Tensor::empty(Shape({2, rows, D}), dt, alloc, MemCategory::Workspace);
  Tensor al = Tensor::empty(Shape({2, 2, rows}), dt, alloc, MemCategory::Workspace);
  kernels::KernelTable::SoftmaxStateRef st[2];
  for (int h = 0; h < 2; ++h) {
    st[h] = {o.flat_slice(h * rows * D, (h + 1) * rows * D), al.flat_slice(2 * h * rows, (2 * h + 1) * rows),
             al.flat_slice((2 * h + 1) * rows, (2 * h + 2) * rows)};
    kt.softmax_state_init(st[h]);
  }
  Tensor bufs = Tensor::empty(Shape({2, 2, 2 * R.kv_half}), dt, alloc, MemCategory::Workspace);
  KvBlock cur{k, v};
  std::vector<comm::Work> comm;
  for (int step = 0; step < R.P; ++step) {
    const KvBlock nxt = block_in(bufs, step % 2);
    if (step + 1 < R.P) comm = pass_on(g, R, cur, nxt, kTagK, kTagV);
    const int src = R.src(step);
    // Fixed order: ring step, then the block's chunks, whatever arrives when.
    for (int h = 0; h < 2; ++h) {
      const int qi = cp_chunk(R.P, R.r, h);
      for (int gk = 0; gk < 2; ++gk) {
        const int ki = cp_chunk(R.P, src, gk);
        if (ki > qi) {  // entirely after the diagonal: zero contribution
          if (stats) ++stats->pairs_skipped;
          continue;
        }
        if (stats) ++stats->pairs_computed;
        kt.attention_partial_forward(R.shape, half_of(q, R.q_half, h), R.span(qi), half_of(cur.k, R.kv_half, gk),
                                     half_of(cur.v, R.kv_half, gk), R.span(ki), scale, st[h]);
      }
    }
    if (step + 1 < R.P) {
      const double waited = wait_all(comm);
      if (stats) {
        stats->exposed_s += waited;
        stats->forward_bytes += int64_t(4 * R.kv_half) * int64_t(dtype_size(dt));
      }
      cur = nxt;
    }
  }
  for (int h = 0; h < 2; ++h)
    kt.softmax_state_finalize(R.shape, R.c, st[h], half_of(out, R.q_half, h), half_of(lse, R.lse_half, h));
}

void ring_backward(const kernels::KernelTable& kt, comm::ProcessGroup& g, const Ring& R, const Tensor& q,
                   const Tensor& k, const Tensor& v, double scale, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                   const std::shared_ptr<CachingAllocator>& alloc, CpCommStats* stats) {
  const DType dt = q.dtype();
  const int64_t nkv = 2 * R.kv_half;  // one block's K (or V, dK, dV)
  const size_t es = dtype_size(dt);
  kt.fill(dq, 0.0);
  Tensor bufs = Tensor::empty(Shape({2, 2, nkv}), dt, alloc, MemCategory::Workspace);   // K/V double buffer
  Tensor mine = Tensor::empty(Shape({2, nkv}), dt, alloc, MemCategory::Workspace);      // this step's dK/dV
  Tensor sums = Tensor::empty(Shape({2, 2, nkv}), dt, alloc, MemCategory::Workspace);   // received partial sums
  const KvBlock local{mine.flat_slice(0, nkv), mine.flat_slice(nkv, 2 * nkv)};
  KvBlock cur{k, v};
  std::vector<comm::Work> kv_comm, sum_recv, sum_send;
  for (int step = 0; step < R.P; ++step) {
    const KvBlock nxt = block_in(bufs, step % 2), incoming = block_in(sums, step % 2);
    if (step + 1 < R.P) kv_comm = pass_on(g, R, cur, nxt, kTagK, kTagV);
    if (step > 0) {  // the partial dK/dV of this block from the ranks before, arriving while we compute
      sum_recv.push_back(g.irecv(incoming.k.raw(), size_t(nkv), dt, R.prev(), {.tag = kTagDk}));
      sum_recv.push_back(g.irecv(incoming.v.raw(), size_t(nkv), dt, R.prev(), {.tag = kTagDv}));
    }
    mine.zero_();
    const int src = R.src(step);
    for (int h = 0; h < 2; ++h) {
      const int qi = cp_chunk(R.P, R.r, h);
      for (int gk = 0; gk < 2; ++gk) {
        const int ki = cp_chunk(R.P, src, gk);
        if (ki > qi) {
          if (stats) ++stats->pairs_skipped;
          continue;
        }
        if (stats) ++stats->pairs_computed;
        kt.attention_partial_backward(R.shape, half_of(q, R.q_half, h), R.span(qi), half_of(cur.k, R.kv_half, gk),
                                      half_of(cur.v, R.kv_half, gk), R.span(ki), scale, half_of(out, R.q_half, h),
                                      half_of(lse, R.lse_half, h), half_of(dout, R.q_half, h),
                                      half_of(dq, R.q_half, h), half_of(local.k, R.kv_half, gk),
                                      half_of(local.v, R.kv_half, gk));
      }
    }
    double waited = wait_all(sum_send);  // the previous step's sums left (their buffer is reused below)
    if (step > 0) {
      // Fixed order: the predecessors' sum, then this rank's contribution.
      waited += wait_all(sum_recv);
      kt.add(incoming.k, local.k);
      kt.add(incoming.v, local.v);
    } else {  // this rank's own block: its sum starts here
      kt.copy(incoming.k, local.k);
      kt.copy(incoming.v, local.v);
    }
    const KvBlock total = incoming;
    if (R.P == 1) {
      kt.copy(dk, total.k);
      kt.copy(dv, total.v);
      break;
    }
    sum_send.push_back(g.isend(total.k.raw(), size_t(nkv), dt, R.next(), {.tag = kTagDk}));
    sum_send.push_back(g.isend(total.v.raw(), size_t(nkv), dt, R.next(), {.tag = kTagDv}));
    if (step + 1 < R.P) {
      waited += wait_all(kv_comm);
      cur = nxt;
    }
    if (stats) {
      stats->exposed_s += waited;
      stats->backward_bytes += int64_t((step + 1 < R.P ? 4 : 2) * nkv) * int64_t(es);
    }
  }
  if (R.P > 1) {
    // After cp steps this rank's own block comes back with every rank's share.
    std::vector<comm::Work> last;
    last.push_back(g.irecv(dk.raw(), size_t(nkv), dt, R.prev(), {.tag = kTagDk}));
    last.push_back(g.irecv(dv.raw(), size_t(nkv), dt, R.prev(), {.tag = kTagDv}));
    double waited = wait_all(last);
    waited += wait_all(sum_send);
    if (stats) stats->exposed_s += waited;
  }
}

}  // namespace

int64_t cp_causal_pairs(int64_t seq, int cp_size, int cp_rank) {
  const int64_t c = seq / (2 * cp_size);
  int64_t n = 0;
  for (int h = 0; h < 2; ++h)
    for (int ki = 0; ki < 2 * cp_size; ++ki) n += pairs_of_chunks(c, cp_chunk(cp_size, cp_rank, h), ki);
  return n;
}

void RingAttention::forward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                            const int32_t* chunk_segments, double scale, const Tensor& out, const Tensor& lse,
                            const std::shared_ptr<CachingAllocator>& alloc) const {
  MT_CHECK(group_, "ring attention without a cp group");
  MT_REQUIRE(ConfigError, q.dtype() == DType::F32 || q.dtype() == DType::F64,
             "context parallel attention runs in f32 or f64, not ", dtype_name(q.dtype()));
  ring_forward(kernels::kernels_for(q), *group_, ring_of(s, *group_, chunk_segments), q, k, v, scale, out, lse, alloc,
               stats_);
}

void RingAttention::backward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const int32_t* chunk_segments, double scale, const Tensor& out, const Tensor& lse,
                             const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const std::shared_ptr<CachingAllocator>& alloc) const {
  MT_CHECK(group_, "ring attention without a cp group");
  MT_REQUIRE(ConfigError, q.dtype() == DType::F32 || q.dtype() == DType::F64,
             "context parallel attention runs in f32 or f64, not ", dtype_name(q.dtype()));
  ring_backward(kernels::kernels_for(q), *group_, ring_of(s, *group_, chunk_segments), q, k, v, scale, out, lse,
                dout, dq, dk, dv, alloc, stats_);
}

}  // namespace meshtrain::model
