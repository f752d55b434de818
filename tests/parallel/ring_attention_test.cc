// Ring attention (docs/math.md, "Context parallelism") against the one-rank
// attention kernels in f64 (tolerance 1e-12 relative: only the order of the
// online-softmax folds and of the dK/dV sums differs): cp in {2, 3, 4}, GQA,
// chunks of an odd length, rows packed with documents shorter than a chunk,
// across chunk boundaries and longer than a rank's share, and a row of one
// document. Also: the K/V bytes each rank sends equal docs/math.md (M.51)
// (forward 2 b s h_kv bytes (cp - 1) / cp per layer, backward the K/V again
// plus dK/dV on cp hops), and the balanced chunks give every rank the same
// attention work (chunk pairs computed and legal position pairs).
#include <gtest/gtest.h>

#include <mutex>

#include "meshtrain/comm/thread_world.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/model/ring_attention.h"
#include "support/numeric.h"
#include "support/run_ranks.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

constexpr int64_t kB = 2, kHq = 4, kHkv = 2, kD = 8, kChunk = 5;

std::vector<double> random_values(int64_t n, uint64_t stream) {
  CounterRng rng(17);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = rng.normal(stream, uint64_t(i));
  return v;
}

// Row 0: documents of 1, 3, 7, 12 positions, then one to the end; row 1: one document.
std::vector<int32_t> packed_segments(int64_t T) {
  std::vector<int32_t> seg(size_t(kB * T), 0);
  const int64_t lengths[] = {1, 3, 7, 12};
  int64_t pos = 0;
  int32_t doc = 0;
  for (int64_t len : lengths)
    for (int64_t i = 0; i < len && pos < T; ++i) seg[size_t(pos++)] = doc, doc += (i + 1 == len);
  for (; pos < T; ++pos) seg[size_t(pos)] = doc;
  return seg;
}

// Positions [c * chunk, c * (chunk + 1)) of every row of x [B, T, width].
std::vector<double> chunk_of(const std::vector<double>& x, int64_t T, int64_t width, int chunk) {
  std::vector<double> y;
  for (int64_t b = 0; b < kB; ++b) {
    const auto begin = x.begin() + (b * T + chunk * kChunk) * width;
    y.insert(y.end(), begin, begin + kChunk * width);
  }
  return y;
}

// This rank's pseudo-rows: chunk r of the B rows, then chunk 2 cp - 1 - r.
std::vector<double> local_of(const std::vector<double>& x, int64_t T, int64_t width, int cp, int r) {
  std::vector<double> y = chunk_of(x, T, width, model::cp_chunk(cp, r, 0));
  const std::vector<double> z = chunk_of(x, T, width, model::cp_chunk(cp, r, 1));
  y.insert(y.end(), z.begin(), z.end());
  return y;
}

Tensor tensor_of(std::vector<double>& v) { return Tensor::wrap(v.data(), Shape({int64_t(v.size())}), DType::F64); }

void check_ring(int cp) {
  const int64_t T = 2 * cp * kChunk, nq = kB * T * kHq * kD, nk = kB * T * kHkv * kD;
  const kernels::AttentionShape full{kB, T, kHq, kHkv, kD};
  const double scale = 0.35;
  const auto q = random_values(nq, 1), k = random_values(nk, 2), v = random_values(nk, 3),
             dout = random_values(nq, 4);
  const auto seg = packed_segments(T);
  std::vector<double> out(static_cast<size_t>(nq)), lse(static_cast<size_t>(kB * kHq * T)), dq(out.size()),
      dk(static_cast<size_t>(nk)), dv(dk.size());
  kernels::attention_forward<double>(full, q.data(), k.data(), v.data(), seg.data(), scale, out.data(), lse.data());
  kernels::attention_backward<double>(full, q.data(), k.data(), v.data(), seg.data(), scale, out.data(), lse.data(),
                                      dout.data(), dq.data(), dk.data(), dv.data());
  // lse [B, Hq, T] as [B * Hq, T, 1] rows, so chunk_of applies.
  std::vector<int32_t> chunk_segments;  // [2 cp, B, c]
  for (int chunk = 0; chunk < 2 * cp; ++chunk)
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t t = 0; t < kChunk; ++t) chunk_segments.push_back(seg[size_t(b * T + chunk * kChunk + t)]);

  std::vector<model::CpCommStats> stats(static_cast<size_t>(cp));
  std::mutex mu;
  auto world = comm::ThreadWorld::create(cp);
  run_ranks(cp, [&](int r) {
    auto alloc = CachingAllocator::create();
    auto lq = local_of(q, T, kHq * kD, cp, r), lk = local_of(k, T, kHkv * kD, cp, r),
         lv = local_of(v, T, kHkv * kD, cp, r), ldout = local_of(dout, T, kHq * kD, cp, r);
    std::vector<double> lout(lq.size()), llse(size_t(2 * kB * kHq * kChunk)), ldq(lq.size()), ldk(lk.size()),
        ldv(lk.size());
    const model::RingAttention ring(world->group(r).get(), &stats[size_t(r)]);
    const kernels::AttentionShape local{2 * kB, kChunk, kHq, kHkv, kD};
    ring.forward(local, tensor_of(lq), tensor_of(lk), tensor_of(lv), chunk_segments.data(), scale, tensor_of(lout),
                 tensor_of(llse), alloc);
    ring.backward(local, tensor_of(lq), tensor_of(lk), tensor_of(lv), chunk_segments.data(), scale, tensor_of(lout),
                  tensor_of(llse), tensor_of(ldout), tensor_of(ldq), tensor_of(ldk), tensor_of(ldv), alloc);
    std::vector<double> want_lse;
    for (int h = 0; h < 2; ++h)
      for (int64_t b = 0; b < kB; ++b)
        for (int64_t hq = 0; hq < kHq; ++hq)
          for (int64_t t = 0; t < kChunk; ++t)
            want_lse.push_back(lse[size_t((b * kHq + hq) * T + model::cp_chunk(cp, r, h) * kChunk + t)]);
    std::lock_guard<std::mutex> lock(mu);
    SCOPED_TRACE(::testing::Message() << "cp " << cp << " rank " << r);
    EXPECT_LT(max_rel_diff(lout, local_of(out, T, kHq * kD, cp, r), 1e-3), 1e-12);
    EXPECT_LT(max_rel_diff(llse, want_lse, 1e-3), 1e-12);
    EXPECT_LT(max_rel_diff(ldq, local_of(dq, T, kHq * kD, cp, r), 1e-3), 1e-12);
    EXPECT_LT(max_rel_diff(ldk, local_of(dk, T, kHkv * kD, cp, r), 1e-3), 1e-12);
    EXPECT_LT(max_rel_diff(ldv, local_of(dv, T, kHkv * kD, cp, r), 1e-3), 1e-12);
  });
  // Bytes: a rank's K/V block is 2 (K and V) x b x (s / cp) x h_kv x 8 bytes.
  const int64_t block = 2 * kB * (T / cp) * kHkv * kD * 8;
  for (int r = 0; r < cp; ++r) {
    SCOPED_TRACE(::testing::Message() << "cp " << cp << " rank " << r);
    EXPECT_EQ(stats[size_t(r)].forward_bytes, (cp - 1) * block);           // 2 b s h_kv bytes (cp - 1) / cp
    EXPECT_EQ(stats[size_t(r)].backward_bytes, (cp - 1) * block + cp * block);  // K/V, then dK/dV home
    // Balanced: 2 cp + 1 of the 4 cp chunk pairs per pass (forward + backward).
    EXPECT_EQ(stats[size_t(r)].pairs_computed, 2 * (2 * cp + 1));
    EXPECT_EQ(stats[size_t(r)].pairs_skipped, 2 * (2 * cp - 1));
  }
}

}  // namespace

TEST(RingAttention, MatchesOneRankForwardAndBackwardWithPackedDocuments) {
  for (int cp : {2, 3, 4}) check_ring(cp);
}

// Every rank does the same causal attention work (within 5%: here exactly),
// which the contiguous split (rank r holding positions [r s / cp, (r+1) s / cp))
// would not: its last rank does 2 cp - 1 times the first's.
TEST(RingAttention, BalancedChunksGiveEveryRankTheSameCausalWork) {
  for (int cp : {2, 4, 8}) {
    const int64_t seq = 4096;
    int64_t lo = model::cp_causal_pairs(seq, cp, 0), hi = lo, total = 0;
    for (int r = 0; r < cp; ++r) {
      const int64_t p = model::cp_causal_pairs(seq, cp, r);
      lo = std::min(lo, p);
      hi = std::max(hi, p);
      total += p;
    }
    EXPECT_EQ(total, seq * (seq + 1) / 2) << "cp " << cp;  // every legal pair exactly once
    EXPECT_LE(double(hi - lo), 0.05 * double(lo)) << "cp " << cp;
  }
}
