// Reproducible mode's chunk-pair attention (model/canonical_attention.h,
// docs/math.md (M.74)) on one rank: rows laid out as chunk pairs (pair v =
// chunks v and 2V-1-v of every row, as train/context_shard.h lays them out)
// give the same attention as the plain kernel on the rows in position
// order, packed documents crossing chunk boundaries included: out, lse,
// dq, dk and dv agree to f64 rounding. (Every layout's equality bit for bit
// is tests/train/cp_bitwise_test.cc's.)
#include "meshtrain/model/canonical_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/comm/thread_world.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/model/ring_attention.h"
#include "model/model_fixtures.h"
#include "support/run_ranks.h"

using namespace meshtrain;
using meshtrain::testing::columns_of;

namespace {

constexpr int64_t B = 2, V = 4, c = 3, T = 2 * V * c, Hq = 4, Hkv = 2, D = 8;

std::vector<double> random_values(int64_t n, uint64_t stream) {
  CounterRng rng(11);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = rng.normal(stream, uint64_t(i));
  return v;
}

// [B, T, H, D] in position order <-> pair-major pseudo-rows [V, 2, B, c, H, D].
std::vector<double> to_pairs(const std::vector<double>& rows, int64_t H, bool back = false) {
  std::vector<double> out(rows.size());
  const int64_t w = c * H * D;
  for (int64_t v = 0; v < V; ++v)
    for (int h = 0; h < 2; ++h)
      for (int64_t b = 0; b < B; ++b) {
        const int64_t pair = ((2 * v + h) * B + b) * w, row = (b * T + model::cp_chunk(int(V), int(v), h) * c) * H * D;
        for (int64_t i = 0; i < w; ++i) (back ? out[size_t(row + i)] : out[size_t(pair + i)]) =
            back ? rows[size_t(pair + i)] : rows[size_t(row + i)];
      }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_GT(scale, 0) << what;
  EXPECT_LE(worst, 1e-12 * scale) << what;
}

}  // namespace

TEST(ChunkPairAttention, OneRankEqualsPlainAttentionOnTheRows) {
  auto alloc = CachingAllocator::create();
  const kernels::KernelTable& k = kernels::kernels_for(Device::Cpu);
  const auto q = random_values(B * T * Hq * D, 1), kk = random_values(B * T * Hkv * D, 2),
             v = random_values(B * T * Hkv * D, 3), dout = random_values(B * T * Hq * D, 4);
  // Two documents per row, the boundary inside a chunk (position 10 of 24).
  std::vector<int32_t> seg(size_t(B * T)), chunk_segments(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) seg[size_t(b * T + t)] = int32_t(2 * b + (t >= 10));
  for (int64_t i = 0; i < 2 * V; ++i)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < c; ++t) chunk_segments[size_t((i * B + b) * c + t)] = seg[size_t(b * T + i * c + t)];
  const double scale = 1.0 / std::sqrt(double(D));
  auto t = [&](const std::vector<double>& x) { return tensor_from(x, Shape{int64_t(x.size())}, alloc); };
  auto zeros = [&](int64_t n) { return t(std::vector<double>(size_t(n), 0.0)); };

  // Plain attention on the rows in position order.
  const kernels::AttentionShape rows{B, T, Hq, Hkv, D};
  const Tensor out = zeros(B * T * Hq * D), lse = zeros(B * Hq * T), dq = zeros(B * T * Hq * D),
               dk = zeros(B * T * Hkv * D), dv = zeros(B * T * Hkv * D);
  k.attention_forward(rows, t(q), t(kk), t(v), seg.data(), scale, out, lse);
  k.attention_backward(rows, t(q), t(kk), t(v), seg.data(), scale, out, lse, t(dout), dq, dk, dv);

  // The chunk pairs.
  const model::ChunkPairs pairs{nullptr, V, chunk_segments.data()};
  const kernels::AttentionShape pseudo{2 * V * B, c, Hq, Hkv, D};
  const Tensor pq = t(to_pairs(q, Hq)), pk = t(to_pairs(kk, Hkv)), pv = t(to_pairs(v, Hkv));
  const Tensor pout = zeros(B * T * Hq * D), plse = zeros(B * Hq * T), pdq = zeros(B * T * Hq * D),
               pdk = zeros(B * T * Hkv * D), pdv = zeros(B * T * Hkv * D);
  model::chunk_pair_attention_forward(k, pairs, pseudo, pq, pk, pv, scale, pout, plse, alloc);
  model::chunk_pair_attention_backward(k, pairs, pseudo, pq, pk, pv, scale, pout, plse, t(to_pairs(dout, Hq)), pdq,
                                       pdk, pdv, alloc);
  expect_close(to_pairs(to_vector<double>(pout), Hq, true), to_vector<double>(out), "out");
  expect_close(to_pairs(to_vector<double>(pdq), Hq, true), to_vector<double>(dq), "dq");
  expect_close(to_pairs(to_vector<double>(pdk), Hkv, true), to_vector<double>(dk), "dk");
  expect_close(to_pairs(to_vector<double>(pdv), Hkv, true), to_vector<double>(dv), "dv");
  // Each query head's part apart (docs/math.md (M.76)): the same dq bits, a
  // KV head's query heads add up to its dk and dv, and each part is bit for
  // bit what multi-head attention gives that head on its KV head's K and V.
  kernels::AttentionShape per_query = pseudo;
  per_query.kv_grads_per_query = true;
  const Tensor qdq = zeros(B * T * Hq * D), qdk = zeros(B * T * Hq * D), qdv = zeros(B * T * Hq * D);
  model::chunk_pair_attention_backward(k, pairs, per_query, pq, pk, pv, scale, pout, plse, t(to_pairs(dout, Hq)), qdq,
                                       qdk, qdv, alloc);
  EXPECT_EQ(to_vector<double>(qdq), to_vector<double>(pdq));
  for (const auto& [parts, whole, what] : {std::tuple{qdk, pdk, "dk"}, std::tuple{qdv, pdv, "dv"}}) {
    const auto q_parts = to_vector<double>(parts);
    std::vector<double> summed(size_t(B * T * Hkv * D), 0.0);
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < D; ++d)
          summed[size_t((r * Hkv + h / (Hq / Hkv)) * D + d)] += q_parts[size_t((r * Hq + h) * D + d)];
    expect_close(summed, to_vector<double>(whole), what);
  }
  auto repeated = [&](const std::vector<double>& kv) {  // [rows, Hkv, D] -> [rows, Hq, D]
    std::vector<double> out;
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < D; ++d) out.push_back(kv[size_t((r * Hkv + h / (Hq / Hkv)) * D + d)]);
    return out;
  };
  const kernels::AttentionShape mha{2 * V * B, c, Hq, Hq, D};
  const Tensor mdq = zeros(B * T * Hq * D), mdk = zeros(B * T * Hq * D), mdv = zeros(B * T * Hq * D);
  model::chunk_pair_attention_backward(k, pairs, mha, pq, t(repeated(to_vector<double>(pk))),
                                       t(repeated(to_vector<double>(pv))), scale, pout, plse, t(to_pairs(dout, Hq)),
                                       mdq, mdk, mdv, alloc);
  EXPECT_EQ(to_vector<double>(qdk), to_vector<double>(mdk));
  EXPECT_EQ(to_vector<double>(qdv), to_vector<double>(mdv));
  // lse [pseudo-row, Hq, c] against [B, Hq, T]: the same value per (row, head, position).
  const auto want = to_vector<double>(lse), got = to_vector<double>(plse);
  for (int64_t vv = 0; vv < V; ++vv)
    for (int h = 0; h < 2; ++h)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t hq = 0; hq < Hq; ++hq)
          for (int64_t i = 0; i < c; ++i) {
            const int64_t pos = model::cp_chunk(int(V), int(vv), h) * c + i;
            ASSERT_NEAR(got[size_t((((2 * vv + h) * B + b) * Hq + hq) * c + i)], want[size_t((b * Hq + hq) * T + pos)],
                        1e-12);
          }
}

// Grouped-query attention's head tree (docs/math.md (M.76)): each KV
// head's dK as the tree over its query heads' parts, subtrees of a count that is not a power of two added right
// to left; two ranks sharing one KV head (3 query heads each) end with the
// one-rank bits. f32, where another grouping would round differently.
namespace {
std::vector<float> random_f32(int64_t n, uint64_t stream) {
  CounterRng rng(5);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(rng.normal(stream, uint64_t(i)) * std::ldexp(1.0, int(i % 9)));
  return v;
}
}  // namespace

TEST(GroupedQueryHeads, EachKvHeadIsTheTreeOverItsQueryHeadsOnEveryLayout) {
  auto alloc = CachingAllocator::create();
  const kernels::KernelTable& k = kernels::kernels_for(Device::Cpu);
  constexpr int64_t n = 5, d = 4, g = 6;  // one KV head of 6 query heads
  const auto parts = random_f32(n * g * d, 2);
  auto part = [&](int64_t t, int64_t h, int64_t i) { return parts[size_t((t * g + h) * d + i)]; };
  std::vector<float> want(size_t(n * d));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) {
      auto p = [&](int64_t h) { return part(t, h, i); };
      want[size_t(t * d + i)] = ((p(0) + p(1)) + (p(2) + p(3))) + (p(4) + p(5));  // [0,4) + [4,6)
    }
  const Tensor one = Tensor::zeros(Shape{n, d}, DType::F32, alloc, MemCategory::Workspace);
  model::sum_query_heads(k, tensor_from(parts, Shape{n, g * d}, alloc), one, d, nullptr, alloc);
  EXPECT_EQ(to_vector<float>(one), want);
  // Sequential order rounds differently: the test tells groupings apart.
  std::vector<float> in_order(size_t(n * d), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i)
      for (int64_t h = 0; h < g; ++h) in_order[size_t(t * d + i)] += part(t, h, i);
  EXPECT_NE(in_order, want);

  auto world = comm::ThreadWorld::create(2);
  std::vector<std::vector<float>> got(2);
  meshtrain::testing::run_ranks(2, [&](int r) {
    const Tensor mine = tensor_from(columns_of(parts, n, g * d, r * 3 * d, 3 * d), Shape{n, 3 * d}, alloc);
    const Tensor out = Tensor::zeros(Shape{n, d}, DType::F32, alloc, MemCategory::Workspace);
    model::sum_query_heads(k, mine, out, d, world->group(r).get(), alloc);
    got[size_t(r)] = to_vector<float>(out);
  });
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);

  // Two KV heads of 3 on one rank: ((p0 + p1) + p2) each.
  const Tensor two = Tensor::zeros(Shape{n, 2 * d}, DType::F32, alloc, MemCategory::Workspace);
  model::sum_query_heads(k, tensor_from(parts, Shape{n, g * d}, alloc), two, d, nullptr, alloc);
  const auto both = to_vector<float>(two);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t kh = 0; kh < 2; ++kh)
      for (int64_t i = 0; i < d; ++i) {
        auto p = [&](int64_t h) { return part(t, kh * 3 + h, i); };
        EXPECT_EQ(both[size_t((t * 2 + kh) * d + i)], (p(0) + p(1)) + p(2));
      }
}
