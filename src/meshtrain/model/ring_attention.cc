#include "meshtrain/model/ring_attention.h"

#include <chrono>
#include <utility>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTagK = 0x6370, kTagV = kTagK + 1, kTagDk = kTagK + 2, kTagDv = kTagK + 3;

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

// The K and V of one block (both chunks), sent or received as two messages.
template <typename T>
struct KvBlock {
  T* k;
  T* v;
};

// Block i of a [2, 2, n] buffer (K then V of n elements each).
template <typename T>
KvBlock<T> block_in(const Tensor& t, int i) {
  return {t.data<T>() + 2 * i * t.dim(2), t.data<T>() + (2 * i + 1) * t.dim(2)};
}

template <typename T>
std::vector<comm::Work> pass_on(comm::ProcessGroup& g, const Ring& R, KvBlock<T> send, KvBlock<T> recv, int tag_k,
                                int tag_v, DType dt) {
  const size_t n = size_t(2 * R.kv_half);
  std::vector<comm::Work> w;
  w.push_back(g.irecv(recv.k, n, dt, R.prev(), {.tag = tag_k}));
  w.push_back(g.irecv(recv.v, n, dt, R.prev(), {.tag = tag_v}));
  w.push_back(g.isend(send.k, n, dt, R.next(), {.tag = tag_k}));
  w.push_back(g.isend(send.v, n, dt, R.next(), {.tag = tag_v}));
  return w;
}

double wait_all(std::vector<comm::Work>& works) {
  const auto t0 = Clock::now();
  for (comm::Work& w : works) w.wait();
  works.clear();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <typename T>
void ring_forward(comm::ProcessGroup& g, const Ring& R, const T* q, const T* k, const T* v, T scale, T* out, T* lse,
                  DType dt, const std::shared_ptr<CachingAllocator>& alloc, CpCommStats* stats) {
  const int64_t D = R.shape.head_dim, rows = R.B * R.shape.q_heads * R.c;
  // Softmax states of the two query halves (in the accumulate type: never 16 bits).
  Tensor o = Tensor::empty(Shape({2, rows, D}), dt, alloc, MemCategory::Workspace);
  Tensor al = Tensor::empty(Shape({2, 2, rows}), dt, alloc, MemCategory::Workspace);
  kernels::SoftmaxState<T> st[2];
  for (int h = 0; h < 2; ++h) {
    st[h] = {o.data<T>() + h * rows * D, al.data<T>() + (2 * h) * rows, al.data<T>() + (2 * h + 1) * rows};
    kernels::softmax_state_init(st[h], rows, D);
  }
  Tensor bufs = Tensor::empty(Shape({2, 2, 2 * R.kv_half}), dt, alloc, MemCategory::Workspace);
  KvBlock<T> cur{const_cast<T*>(k), const_cast<T*>(v)};
  std::vector<comm::Work> comm;
  for (int step = 0; step < R.P; ++step) {
    const KvBlock<T> nxt = block_in<T>(bufs, step % 2);
    if (step + 1 < R.P) comm = pass_on(g, R, cur, nxt, kTagK, kTagV, dt);
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
        kernels::attention_partial_forward<T>(R.shape, q + h * R.q_half, R.span(qi), cur.k + gk * R.kv_half,
                                              cur.v + gk * R.kv_half, R.span(ki), scale, st[h]);
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
    kernels::softmax_state_finalize<T>(R.shape, R.c, st[h], out + h * R.q_half, lse + h * R.lse_half);
}

template <typename T>
void ring_backward(comm::ProcessGroup& g, const Ring& R, const T* q, const T* k, const T* v, T scale, const T* out,
                   const T* lse, const T* dout, T* dq, T* dk, T* dv, DType dt,
                   const std::shared_ptr<CachingAllocator>& alloc, CpCommStats* stats) {
  const int64_t nkv = 2 * R.kv_half;  // one block's K (or V, dK, dV)
  const size_t es = dtype_size(dt);
  std::fill(dq, dq + 2 * R.q_half, T(0));
  Tensor bufs = Tensor::empty(Shape({2, 2, nkv}), dt, alloc, MemCategory::Workspace);   // K/V double buffer
  Tensor mine = Tensor::empty(Shape({2, nkv}), dt, alloc, MemCategory::Workspace);      // this step's dK/dV
  Tensor sums = Tensor::empty(Shape({2, 2, nkv}), dt, alloc, MemCategory::Workspace);   // received partial sums
  const KvBlock<T> local{mine.data<T>(), mine.data<T>() + nkv};
  KvBlock<T> cur{const_cast<T*>(k), const_cast<T*>(v)};
  std::vector<comm::Work> kv_comm, sum_recv, sum_send;
  for (int step = 0; step < R.P; ++step) {
    const KvBlock<T> nxt = block_in<T>(bufs, step % 2), incoming = block_in<T>(sums, step % 2);
    if (step + 1 < R.P) kv_comm = pass_on(g, R, cur, nxt, kTagK, kTagV, dt);
    if (step > 0) {  // the partial dK/dV of this block from the ranks before, arriving while we compute
      sum_recv.push_back(g.irecv(incoming.k, size_t(nkv), dt, R.prev(), {.tag = kTagDk}));
      sum_recv.push_back(g.irecv(incoming.v, size_t(nkv), dt, R.prev(), {.tag = kTagDv}));
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
        kernels::attention_partial_backward<T>(R.shape, q + h * R.q_half, R.span(qi), cur.k + gk * R.kv_half,
                                               cur.v + gk * R.kv_half, R.span(ki), scale, out + h * R.q_half,
                                               lse + h * R.lse_half, dout + h * R.q_half, dq + h * R.q_half,
                                               local.k + gk * R.kv_half, local.v + gk * R.kv_half);
      }
    }
    double waited = wait_all(sum_send);  // the previous step's sums left (their buffer is reused below)
    if (step > 0) {
      // Fixed order: the predecessors' sum, then this rank's contribution.
      waited += wait_all(sum_recv);
      for (int64_t i = 0; i < nkv; ++i) incoming.k[i] += local.k[i];
      for (int64_t i = 0; i < nkv; ++i) incoming.v[i] += local.v[i];
    } else {  // this rank's own block: its sum starts here
      std::copy(local.k, local.k + nkv, incoming.k);
      std::copy(local.v, local.v + nkv, incoming.v);
    }
    const KvBlock<T> total = incoming;
    if (R.P == 1) {
      std::copy(total.k, total.k + nkv, dk);
      std::copy(total.v, total.v + nkv, dv);
      break;
    }
    sum_send.push_back(g.isend(total.k, size_t(nkv), dt, R.next(), {.tag = kTagDk}));
    sum_send.push_back(g.isend(total.v, size_t(nkv), dt, R.next(), {.tag = kTagDv}));
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
    last.push_back(g.irecv(dk, size_t(nkv), dt, R.prev(), {.tag = kTagDk}));
    last.push_back(g.irecv(dv, size_t(nkv), dt, R.prev(), {.tag = kTagDv}));
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
  const Ring R = ring_of(s, *group_, chunk_segments);
  if (q.dtype() == DType::F32)
    ring_forward<float>(*group_, R, q.data<float>(), k.data<float>(), v.data<float>(), float(scale),
                        out.data<float>(), lse.data<float>(), q.dtype(), alloc, stats_);
  else if (q.dtype() == DType::F64)
    ring_forward<double>(*group_, R, q.data<double>(), k.data<double>(), v.data<double>(), scale, out.data<double>(),
                         lse.data<double>(), q.dtype(), alloc, stats_);
  else
    MT_THROW(ConfigError, "context parallel attention runs in f32 or f64, not ", dtype_name(q.dtype()));
}

void RingAttention::backward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const int32_t* chunk_segments, double scale, const Tensor& out, const Tensor& lse,
                             const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const std::shared_ptr<CachingAllocator>& alloc) const {
  MT_CHECK(group_, "ring attention without a cp group");
  const Ring R = ring_of(s, *group_, chunk_segments);
  if (q.dtype() == DType::F32)
    ring_backward<float>(*group_, R, q.data<float>(), k.data<float>(), v.data<float>(), float(scale),
                         out.data<float>(), lse.data<float>(), dout.data<float>(), dq.data<float>(),
                         dk.data<float>(), dv.data<float>(), q.dtype(), alloc, stats_);
  else if (q.dtype() == DType::F64)
    ring_backward<double>(*group_, R, q.data<double>(), k.data<double>(), v.data<double>(), scale,
                          out.data<double>(), lse.data<double>(), dout.data<double>(), dq.data<double>(),
                          dk.data<double>(), dv.data<double>(), q.dtype(), alloc, stats_);
  else
    MT_THROW(ConfigError, "context parallel attention runs in f32 or f64, not ", dtype_name(q.dtype()));
}

}  // namespace meshtrain::model
