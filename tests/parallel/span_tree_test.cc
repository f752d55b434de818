// Uneven micro-batch counts per replica (docs/math.md (M.75)): ranks holding
// contiguous spans of any length of a window's leaves, each summing its
// span's aligned subtrees (BlockTree from its first leaf) and finishing the
// tree across ranks (span_tree_all_reduce), end with the bits one rank gets
// summing every leaf in the tree (M.10) — not those of any other grouping.
#include "meshtrain/model/span_tree.h"

#include <gtest/gtest.h>

#include <mutex>
#include <random>

#include "meshtrain/comm/launch.h"
#include "meshtrain/model/canonical_sum.h"

using namespace meshtrain;

namespace {

constexpr int kElems = 33;

// Leaf i: values whose sum depends on the grouping.
std::vector<float> leaf_values(int64_t i) {
  std::vector<float> v(static_cast<size_t>(kElems));
  std::mt19937 gen(uint32_t(1000 + i));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : v) x = u(gen) * (i % 3 == 0 ? 1e4f : 1e-3f);
  return v;
}

Tensor leaf_tensor(int64_t i, const std::shared_ptr<CachingAllocator>& alloc) {
  Tensor t = Tensor::empty(Shape{kElems}, DType::F32, alloc, MemCategory::Workspace);
  const std::vector<float> values = leaf_values(i);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

std::vector<float> values_of(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// One rank summing leaves 0 .. W-1 in the tree.
std::vector<float> one_rank_tree(int64_t W) {
  auto alloc = CachingAllocator::create();
  model::BlockTree tree;
  for (int64_t i = 0; i < W; ++i) tree.push(leaf_tensor(i, alloc));
  return values_of(tree.root());
}

// Every rank of a group with these leaf counts (0: a rank holding none,
// as a context-parallel peer) ends with `want`.
void expect_tree(const std::vector<int64_t>& counts, const std::vector<float>& want) {
  std::vector<model::LeafSpan> spans;
  int64_t at = 0;
  for (const int64_t c : counts) spans.push_back({at, c}), at += c;
  std::mutex mu;
  std::vector<std::vector<float>> got(counts.size());
  comm::launch_threads(int(counts.size()), [&](comm::ParallelContext& ctx) {
    const model::LeafSpan me = spans[size_t(ctx.rank)];
    model::BlockTree tree(me.first);
    for (int64_t i = me.first; i < me.end(); ++i) tree.push(leaf_tensor(i, ctx.allocator));
    std::vector<Tensor> parts = tree.parts();
    EXPECT_EQ(parts.size(), model::aligned_blocks(me).size());
    if (parts.empty()) parts.push_back(Tensor::zeros(Shape{kElems}, DType::F32, ctx.allocator, MemCategory::Comm));
    model::span_tree_all_reduce(*ctx.world, spans, parts, ctx.allocator);
    std::lock_guard<std::mutex> lock(mu);
    got[size_t(ctx.rank)] = values_of(parts[0]);
  });
  for (size_t r = 0; r < counts.size(); ++r)
    EXPECT_EQ(got[r], want) << "rank " << r << " of counts " << ::testing::PrintToString(counts);
}

}  // namespace

TEST(SpanTree, AlignedBlocksAreTheLargestSubtreesOfTheSpan) {
  using S = model::LeafSpan;
  auto firsts_counts = [](S s) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const S& b : model::aligned_blocks(s)) out.emplace_back(b.first, b.count);
    return out;
  };
  EXPECT_EQ(firsts_counts({1, 6}), (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 2}, {4, 2}, {6, 1}}));
  EXPECT_EQ(firsts_counts({0, 8}), (std::vector<std::pair<int64_t, int64_t>>{{0, 8}}));
  EXPECT_EQ(firsts_counts({3, 3}), (std::vector<std::pair<int64_t, int64_t>>{{3, 1}, {4, 2}}));
  EXPECT_TRUE(model::aligned_blocks({5, 0}).empty());
}

TEST(SpanTree, UnevenSpansEndWithTheOneRankTreeBitForBit) {
  const std::vector<float> want8 = one_rank_tree(8);
  // The fixture tells groupings apart: 3 + 3 + 2 leaves summed per rank then added is not the tree.
  std::vector<float> by_rank(size_t(kElems), 0.0f);
  for (const auto& [first, count] : std::vector<std::pair<int, int>>{{0, 3}, {3, 3}, {6, 2}}) {
    std::vector<float> s(size_t(kElems), 0.0f);
    for (int i = first; i < first + count; ++i)
      for (int e = 0; e < kElems; ++e) s[size_t(e)] += leaf_values(i)[size_t(e)];
    for (int e = 0; e < kElems; ++e) by_rank[size_t(e)] += s[size_t(e)];
  }
  ASSERT_NE(by_rank, want8);
  expect_tree({3, 3, 2}, want8);
  expect_tree({2, 3, 3}, want8);
  expect_tree({1, 1, 1, 5}, want8);
  expect_tree({5, 1, 1, 1}, want8);
  expect_tree({2, 1, 2, 1, 2}, want8);
  expect_tree({1, 1, 1, 1, 1, 1, 2}, want8);
  expect_tree({8}, want8);
  // Ranks holding none (a replica's cp peers) receive the root.
  expect_tree({3, 0, 3, 0, 2, 0}, want8);
  expect_tree({0, 8}, want8);
  expect_tree({7, 9}, one_rank_tree(16));
  expect_tree({6, 5, 5}, one_rank_tree(16));
}

TEST(SpanTree, RandomSpansOfRandomWindows) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t W = int64_t(1) << std::uniform_int_distribution<int>(1, 5)(gen);
    const int R = std::uniform_int_distribution<int>(1, int(std::min<int64_t>(W, 6)))(gen);
    std::vector<int64_t> cuts;
    for (int64_t i = 1; i < W; ++i) cuts.push_back(i);
    std::shuffle(cuts.begin(), cuts.end(), gen);
    cuts.resize(size_t(R - 1));
    cuts.push_back(0), cuts.push_back(W);
    std::sort(cuts.begin(), cuts.end());
    std::vector<int64_t> counts;
    for (size_t i = 1; i < cuts.size(); ++i) counts.push_back(cuts[i] - cuts[i - 1]);
    expect_tree(counts, one_rank_tree(W));
  }
}

TEST(SpanTree, AWindowNotAPowerOfTwoIsRefused) {
  EXPECT_THROW(expect_tree({3, 2}, one_rank_tree(4)), ConfigError);
}
