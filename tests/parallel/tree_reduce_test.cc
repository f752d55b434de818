// The fixed-tree reductions of reproducible mode: every rank ends with the
// bits of ((g0 + g1) + (g2 + g3)), which is not what a rank-order sum gives
// on the same data.
#include "meshtrain/model/tree_reduce.h"

#include <gtest/gtest.h>

#include <mutex>

#include "meshtrain/comm/hierarchical_group.h"
#include "meshtrain/comm/launch.h"
#include "meshtrain/parallel/grad_tree.h"

using namespace meshtrain;

namespace {

// Rank r's contribution: values whose sum depends on the grouping
// (1 + 1e-8 - 1 + 1e-8: in rank order 1e-8, as ((1 + 1e-8) + (-1 + 1e-8)) 0).
std::vector<float> contribution(int r, int n) {
  const float base[4] = {1.0f, 1e-8f, -1.0f, 1e-8f};
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = base[r % 4] * float(1 + (i + r / 4) % 7);
  return v;
}

std::vector<float> tree_of(const std::vector<std::vector<float>>& leaves) {
  std::vector<std::vector<float>> level = leaves;
  while (level.size() > 1) {
    std::vector<std::vector<float>> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      std::vector<float> s = level[i];
      for (size_t e = 0; e < s.size(); ++e) s[e] += level[i + 1][e];
      next.push_back(s);
    }
    level = next;
  }
  return level[0];
}

}  // namespace

TEST(TreeReduce, AllReduceAndReduceScatterFollowTheTree) {
  const int R = 4, n = 16;
  std::vector<std::vector<float>> leaves;
  for (int r = 0; r < R; ++r) leaves.push_back(contribution(r, n));
  const std::vector<float> want = tree_of(leaves);
  std::vector<float> rank_order = leaves[0];
  for (int r = 1; r < R; ++r)
    for (int e = 0; e < n; ++e) rank_order[size_t(e)] += leaves[size_t(r)][size_t(e)];
  ASSERT_NE(rank_order, want) << "the fixture must tell the orders apart";
  std::mutex mu;
  std::vector<std::vector<float>> all(R), scattered(R);
  comm::launch_threads(R, [&](comm::ParallelContext& ctx) {
    std::vector<float> a = contribution(ctx.rank, n), b = a;
    model::tree_all_reduce(*ctx.world, Tensor::wrap(a.data(), Shape{n}, DType::F32), ctx.allocator);
    model::tree_reduce_scatter(*ctx.world, Tensor::wrap(b.data(), Shape{n}, DType::F32), ctx.allocator);
    std::lock_guard<std::mutex> lock(mu);
    all[size_t(ctx.rank)] = a;
    scattered[size_t(ctx.rank)] = {b.begin() + ctx.rank * (n / R), b.begin() + (ctx.rank + 1) * (n / R)};
  });
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(all[size_t(r)], want) << "rank " << r;
    EXPECT_EQ(scattered[size_t(r)], std::vector<float>(want.begin() + r * (n / R), want.begin() + (r + 1) * (n / R)))
        << "rank " << r << " owns chunk " << r;
  }
  EXPECT_EQ(model::tree_sum({1e16, 1.0, -1e16, 1.0}), (1e16 + 1.0) + (-1e16 + 1.0));
}

TEST(TreeReduce, LocalLeavesBuildTheSameTreeAsRanks) {
  // Eight leaves closed one by one on one rank give the tree of the eight.
  auto alloc = CachingAllocator::create();
  parallel::GradTree tree(1, DType::F32, alloc);
  std::vector<std::vector<float>> leaves;
  for (int j = 0; j < 8; ++j) {
    leaves.push_back(contribution(j, 8));
    Tensor leaf = tree.leaf(0, 8);
    std::copy(leaves.back().begin(), leaves.back().end(), leaf.data<float>());
    tree.close_leaf(0);
    EXPECT_LE(tree.depth(0), 4);  // a binary counter: at most log2(8) + 1 partial sums
  }
  EXPECT_EQ(to_vector<float>(tree.root(0)), tree_of(leaves));
  tree.clear();
  for (int j = 0; j < 3; ++j) {
    tree.leaf(0, 8);
    tree.close_leaf(0);
  }
  EXPECT_THROW(tree.root(0), ConfigError) << "three leaves do not make one tree";
  comm::launch_threads(3, [&](comm::ParallelContext& ctx) {
    std::vector<float> a(4, 1.f);
    EXPECT_THROW(model::tree_all_reduce(*ctx.world, Tensor::wrap(a.data(), Shape{4}, DType::F32), ctx.allocator),
                 ConfigError);
  });
}

TEST(TreeReduce, UnevenChunksReduceScatterByTheBalancedSplit) {
  // Chunks as the collectives cut them (comm/types.h): 13 over 4 is 4 3 3 3.
  const int R = 4, n = 13;
  std::vector<std::vector<float>> leaves;
  for (int r = 0; r < R; ++r) leaves.push_back(contribution(r, n));
  const std::vector<float> want = tree_of(leaves);
  std::mutex mu;
  std::vector<std::vector<float>> scattered(R);
  comm::launch_threads(R, [&](comm::ParallelContext& ctx) {
    std::vector<float> b = contribution(ctx.rank, n);
    model::tree_reduce_scatter(*ctx.world, Tensor::wrap(b.data(), Shape{n}, DType::F32), ctx.allocator);
    const size_t off = comm::chunk_offset(n, R, ctx.rank), len = comm::chunk_size(n, R, ctx.rank);
    std::lock_guard<std::mutex> lock(mu);
    scattered[size_t(ctx.rank)] = {b.begin() + long(off), b.begin() + long(off + len)};
  });
  for (int r = 0; r < R; ++r) {
    const size_t off = comm::chunk_offset(n, R, r), len = comm::chunk_size(n, R, r);
    EXPECT_EQ(scattered[size_t(r)], std::vector<float>(want.begin() + long(off), want.begin() + long(off + len)))
        << "rank " << r;
  }
}

TEST(TreeReduce, TheHierarchicalFormIsTheSameTree) {
  // Nodes holding contiguous power-of-two blocks: the node's levels, then
  // the nodes' levels, are the flat tree's levels (docs/math.md,
  // "Hierarchical collectives"): the bits of tree_of(leaves), even counts
  // or not, and never the rank-order sum's.
  for (auto [nodes, local] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}})
    for (int n : {16, 13, 3}) {
      SCOPED_TRACE(::testing::Message() << nodes << " nodes x " << local << " ranks, " << n << " elements");
      const int R = nodes * local;
      std::vector<std::vector<float>> leaves;
      for (int r = 0; r < R; ++r) leaves.push_back(contribution(r, n));
      const std::vector<float> want = tree_of(leaves);
      std::mutex mu;
      std::vector<std::vector<float>> all(static_cast<size_t>(R));
      uint64_t link_calls = 0;
      comm::launch_threads(R, [&](comm::ParallelContext& ctx) {
        std::vector<std::string> hosts;
        for (int r = 0; r < R; ++r) hosts.push_back("node" + std::to_string(r / local));
        auto h = comm::HierarchicalGroup::create(ctx.world, *comm::node_layout(hosts, ctx.rank, nullptr));
        std::vector<float> a = contribution(ctx.rank, n);
        model::tree_all_reduce(*h, Tensor::wrap(a.data(), Shape{n}, DType::F32), ctx.allocator);
        std::lock_guard<std::mutex> lock(mu);
        all[size_t(ctx.rank)] = a;
        link_calls += h->inter().stats()[comm::OpKind::Send].calls;
      });
      for (int r = 0; r < R; ++r) EXPECT_EQ(all[size_t(r)], want) << "rank " << r;
      EXPECT_GT(link_calls, 0u) << "the tree did not go through the inter-node group";
    }
}
