// Hierarchical collectives (comm/hierarchical_group.h) against the flat
// ones on the same group, with a node map given by hand: n "nodes" of l
// ranks. Runs on threads and under mpirun (comm_mpi_test, 4 processes).
#include "meshtrain/comm/hierarchical_group.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "harness.h"

namespace meshtrain::comm {
namespace {

using testing::for_each_rank;
using testing::get;
using testing::make_buffer;

std::vector<std::string> hosts(int nodes, int local) {
  std::vector<std::string> h;
  for (int a = 0; a < nodes; ++a)
    for (int j = 0; j < local; ++j) h.push_back("node" + std::to_string(a));
  return h;
}

// The layouts the backend has ranks for.
std::vector<std::pair<int, int>> layouts() {
  std::vector<std::pair<int, int>> out;
  for (auto [n, l] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}, std::pair{2, 4}, std::pair{4, 2}})
    if (n * l <= testing::max_ranks()) out.push_back({n, l});
  return out;
}

// fn(hierarchical group) on every rank of an n x l layout: the group is a
// split of the harness's group, so its flat form is a group of its own.
void on_layout(int nodes, int local, const std::function<void(HierarchicalGroup&)>& fn,
               HierarchicalGroup::Choice choose = {}) {
  SCOPED_TRACE(::testing::Message() << nodes << " nodes x " << local << " ranks");
  ASSERT_TRUE(for_each_rank(nodes * local, [&](ProcessGroup& g) {
    auto flat = g.split(0, g.rank(), "dp");
    std::string why;
    const auto layout = node_layout(hosts(nodes, local), g.rank(), &why);
    ASSERT_TRUE(layout) << why;
    auto h = HierarchicalGroup::create(flat, *layout, choose);
    EXPECT_EQ(h->intra().size(), local);
    EXPECT_EQ(h->inter().size(), nodes);
    fn(*h);
  }));
}

// Integer values: every sum is exact, so any order gives the same bits.
double exact_value(int rank, size_t i) { return double(int((rank * 7 + i * 3) % 11) - 5); }
// Values whose sums round: orders differ in the last bits.
double rounding_value(int rank, size_t i) { return std::sin(double(rank * 1000 + i) * 0.37) * (1.0 + rank * 1e-3); }

TEST(NodeLayout, EqualContiguousBlocksOfAtLeastTwo) {
  const auto L = node_layout(hosts(2, 3), 4, nullptr);
  ASSERT_TRUE(L);
  EXPECT_EQ(L->nodes, 2);
  EXPECT_EQ(L->local, 3);
  EXPECT_EQ(L->node, 1);
  EXPECT_EQ(L->local_rank, 1);
  EXPECT_EQ(L->str(), "2 nodes x 3 ranks");
  std::string why;
  EXPECT_FALSE(node_layout(hosts(1, 4), 0, &why));
  EXPECT_EQ(why, "its members are on one node");
  EXPECT_FALSE(node_layout(hosts(4, 1), 0, &why));
  EXPECT_EQ(why, "it has one member per node: nothing to combine inside a node");
  EXPECT_FALSE(node_layout({"a", "a", "a", "b"}, 0, &why));
  EXPECT_EQ(why, "its nodes hold different numbers of its members (a 3, b 1)");
  EXPECT_FALSE(node_layout({"a", "b", "a", "b"}, 0, &why));
  EXPECT_EQ(why, "the members on a are not contiguous in the group's order");
}

TEST(NodeLayout, ModeNamesAndBadValue) {
  EXPECT_EQ(parse_hierarchical_mode("auto"), HierarchicalMode::Auto);
  EXPECT_EQ(parse_hierarchical_mode("on"), HierarchicalMode::On);
  EXPECT_EQ(parse_hierarchical_mode("off"), HierarchicalMode::Off);
  EXPECT_EQ(to_string(HierarchicalMode::On), "on");
  try {
    parse_hierarchical_mode("yes");
    FAIL() << "accepted 'yes'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("comm.hierarchical = \"yes\": expected \"auto\""), std::string::npos)
        << e.what();
  }
}

TEST(HierarchicalCollectives, AllReduceEqualsTheFlatOneWhereSumsAreExact) {
  for (auto [nodes, local] : layouts())
    on_layout(nodes, local, [&](HierarchicalGroup& h) {
      const int me = h.rank();
      for (DType dt : {DType::F32, DType::F64, DType::I32, DType::BF16})
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
          for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(13), size_t(4099)})
            for (bool in_place : {true, false}) {
              SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << reduce_op_name(op) << " count " << count
                                                << (in_place ? " in place" : ""));
              auto value = [&](size_t i) { return exact_value(me, i); };
              std::vector<char> want = make_buffer(dt, count, value), got = want, send = want;
              h.flat().all_reduce(want.data(), count, dt, op);
              if (in_place) h.all_reduce(got.data(), count, dt, op);
              else h.all_reduce(send.data(), got.data(), count, dt, op);
              ASSERT_EQ(want, got);
            }
    });
}

TEST(HierarchicalCollectives, AllReduceWithinTheRoundingBoundOtherwise) {
  // Two orders of the same R terms differ by at most 2 (R - 1) u sum |x|
  // (each is within (R - 1) u sum |x| of the exact sum; u = 2^-24 for f32).
  for (auto [nodes, local] : layouts())
    on_layout(nodes, local, [&](HierarchicalGroup& h) {
      const size_t count = 3001;
      const int R = h.size();
      std::vector<float> x(count), flat(count), hier(count);
      std::vector<double> abs_sum(count);
      for (size_t i = 0; i < count; ++i) x[i] = float(rounding_value(h.rank(), i)), abs_sum[i] = std::fabs(x[i]);
      h.flat().all_reduce(x.data(), flat.data(), count, DType::F32);
      h.all_reduce(x.data(), hier.data(), count, DType::F32);
      h.flat().all_reduce(abs_sum.data(), count, DType::F64);
      size_t differ = 0;
      for (size_t i = 0; i < count; ++i) {
        ASSERT_LE(std::fabs(double(hier[i]) - double(flat[i])), 2.0 * (R - 1) * 0x1p-24 * abs_sum[i]) << "element " << i;
        differ += hier[i] != flat[i];
      }
      if (R > 2 && !testing::mpi_mode()) EXPECT_GT(differ, 0u) << "the threads backend's two orders never differed";
    });
}

TEST(HierarchicalCollectives, ReduceScatterAndAllGatherPutEveryChunkWhereTheFlatOnesDo) {
  for (auto [nodes, local] : layouts())
    on_layout(nodes, local, [&](HierarchicalGroup& h) {
      const int R = h.size(), me = h.rank();
      for (DType dt : {DType::F32, DType::I64, DType::BF16})
        for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(R * 5 + 3), size_t(1000)})
          for (bool in_place : {true, false}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " count " << count << (in_place ? " in place" : ""));
            const size_t es = dtype_size(dt), off = chunk_offset(count, R, me), mine = chunk_size(count, R, me);
            // reduce-scatter: the rank's chunk of the sum
            auto value = [&](size_t i) { return exact_value(me, i); };
            std::vector<char> in = make_buffer(dt, count, value), in_copy = in, want(mine * es), got(mine * es);
            h.flat().reduce_scatter(in.data(), want.data(), count, dt);
            if (in_place) {
              h.reduce_scatter(in_copy.data(), in_copy.data() + off * es, count, dt);
              std::memcpy(got.data(), in_copy.data() + off * es, mine * es);
            } else {
              h.reduce_scatter(in.data(), got.data(), count, dt);
            }
            ASSERT_EQ(want, got) << "reduce-scatter";
            // all-gather: every chunk from its owner
            std::vector<char> all = make_buffer(dt, count, [&](size_t i) { return exact_value(int(i % 5), i); });
            all.resize(count * es);  // make_buffer's spare byte
            std::vector<char> piece(all.begin() + long(off * es), all.begin() + long((off + mine) * es));
            std::vector<char> flat_out(count * es), hier_out(count * es);
            h.flat().all_gather(piece.data(), flat_out.data(), count, dt);
            if (in_place) {
              std::memcpy(hier_out.data() + off * es, piece.data(), mine * es);
              h.all_gather(hier_out.data() + off * es, hier_out.data(), count, dt);
            } else {
              h.all_gather(piece.data(), hier_out.data(), count, dt);
            }
            ASSERT_EQ(flat_out, all);
            ASSERT_EQ(hier_out, all) << "all-gather";
          }
      // Averages and maxima too.
      std::vector<double> v(20), a(chunk_size(20, R, me)), b(a.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = exact_value(me, i);
      for (ReduceOp op : {ReduceOp::Avg, ReduceOp::Max}) {
        h.flat().reduce_scatter(v.data(), a.data(), v.size(), DType::F64, op);
        h.reduce_scatter(v.data(), b.data(), v.size(), DType::F64, op);
        EXPECT_EQ(a, b) << reduce_op_name(op);
      }
    });
}

TEST(HierarchicalCollectives, SixteenBitSumsStayFlatAndGathersDoNot) {
  on_layout(2, 2, [](HierarchicalGroup& h) {
    EXPECT_FALSE(h.hierarchical(OpKind::AllReduce, DType::BF16, 100));
    EXPECT_FALSE(h.hierarchical(OpKind::ReduceScatter, DType::F16, 100));
    EXPECT_TRUE(h.hierarchical(OpKind::AllGather, DType::BF16, 100));
    EXPECT_TRUE(h.hierarchical(OpKind::AllReduce, DType::F32, 100));
    EXPECT_FALSE(h.hierarchical(OpKind::Broadcast, DType::F32, 100));
    h.inter().reset_stats();
    std::vector<uint16_t> v(64, 0x3f80);  // bf16 1.0
    h.all_reduce(v.data(), v.size(), DType::BF16);
    EXPECT_EQ(v[0], 0x4080) << "bf16 4.0";
    EXPECT_EQ(h.inter().stats()[OpKind::AllReduce].calls, 0u) << "a bf16 sum went over the sub-groups";
  });
}

TEST(HierarchicalCollectives, TheChoiceSendsAnOpFlat) {
  // auto: the planner's choice per op (train/hierarchy.h); here: large only.
  on_layout(2, 2, [](HierarchicalGroup& h) {
    h.inter().reset_stats();
    std::vector<float> small(10, 1.f), large(1000, 1.f);
    h.all_reduce(small.data(), small.size(), DType::F32);
    h.all_reduce(large.data(), large.size(), DType::F32);
    EXPECT_EQ(small[0], 4.f);
    EXPECT_EQ(large[999], 4.f);
    EXPECT_EQ(h.inter().stats()[OpKind::AllReduce].calls, 1u);
  }, [](OpKind, DType, size_t count) { return count >= 100; });
}

TEST(HierarchicalCollectives, NonBlockingOpsCompleteInIssueOrderBesideFlatOnes) {
  for (auto [nodes, local] : layouts())
    on_layout(nodes, local, [&](HierarchicalGroup& h) {
      const int R = h.size(), me = h.rank();
      std::vector<std::vector<float>> bufs(4, std::vector<float>(777));
      std::vector<Work> works;
      for (size_t b = 0; b < bufs.size(); ++b) {
        for (size_t i = 0; i < bufs[b].size(); ++i) bufs[b][i] = float(exact_value(me, i + b));
        works.push_back(h.iall_reduce(bufs[b].data(), bufs[b].data(), bufs[b].size(), DType::F32));
      }
      std::vector<float> gathered(size_t(R) * 3), mine(3, float(me));
      Work g = h.iall_gather(mine.data(), gathered.data(), gathered.size(), DType::F32);
      int one = 1;
      h.flat().all_reduce(&one, 1, DType::I32);  // the flat group meanwhile
      EXPECT_EQ(one, R);
      for (size_t b = bufs.size(); b-- > 0;) works[b].wait();  // in any order
      g.wait();
      for (size_t b = 0; b < bufs.size(); ++b)
        for (size_t i = 0; i < bufs[b].size(); i += 97) {
          double s = 0;
          for (int r = 0; r < R; ++r) s += exact_value(r, i + b);
          ASSERT_EQ(bufs[b][i], float(s));
        }
      for (int r = 0; r < R; ++r) EXPECT_EQ(gathered[size_t(r) * 3], float(r));
    });
}

TEST(HierarchicalCollectives, BytesOverTheLinkFollowTheFormula) {
  // The inter-node group carries what crosses the link: per rank its 1/l
  // piece, a ring of n sending 2(n-1)/n of it (all-reduce) or (n-1)/n
  // (reduce-scatter, all-gather): docs/math.md (M.71).
  for (auto [nodes, local] : layouts())
    on_layout(nodes, local, [&](HierarchicalGroup& h) {
      const int R = h.size(), n = nodes, l = local;
      const size_t count = size_t(R) * 1000, M = count * 4;
      std::vector<float> v(count, 1.f), part(count / size_t(R));
      h.intra().reset_stats();
      h.inter().reset_stats();
      h.all_reduce(v.data(), count, DType::F32);
      h.reduce_scatter(v.data(), part.data(), count, DType::F32);
      h.all_gather(part.data(), v.data(), count, DType::F32);
      const CommStats inter = h.inter().stats(), intra = h.intra().stats();
      EXPECT_EQ(inter[OpKind::AllReduce].bytes, M / size_t(l));
      EXPECT_EQ(inter[OpKind::ReduceScatter].bytes, M / size_t(l));
      EXPECT_EQ(inter[OpKind::AllGather].bytes, M / size_t(l));
      EXPECT_EQ(intra[OpKind::ReduceScatter].bytes, 2 * M);  // all-reduce's and reduce-scatter's
      EXPECT_EQ(intra[OpKind::AllGather].bytes, 2 * M);
      const NodeLayout& L = h.layout();
      const double ring = double(n - 1) / n;
      EXPECT_DOUBLE_EQ(link_bytes_per_rank(OpKind::AllReduce, L, double(M)),
                       2 * ring * double(inter[OpKind::AllReduce].bytes));
      EXPECT_DOUBLE_EQ(link_bytes_per_rank(OpKind::ReduceScatter, L, double(M)),
                       ring * double(inter[OpKind::ReduceScatter].bytes));
      EXPECT_DOUBLE_EQ(link_bytes_per_rank(OpKind::AllReduce, L, double(M)), 2.0 * (n - 1) / n * double(M) / l);
      EXPECT_EQ(h.stats()[OpKind::AllReduce].bytes, M) << "the group itself counts the logical op";
      EXPECT_EQ(h.flat().stats()[OpKind::AllReduce].calls, 0u);
    });
}

TEST(HierarchicalCollectives, AnAbortWakesEveryMember) {
  if (testing::mpi_mode()) GTEST_SKIP() << "under MPI an abort ends the job";
  on_layout(2, 2, [](HierarchicalGroup& h) {
    std::vector<float> v(100, 1.f);
    if (h.rank() == 3) {
      h.abort("rank 3 gave up");
      return;
    }
    try {
      for (int i = 0; i < 100; ++i) h.all_reduce(v.data(), v.size(), DType::F32);
      ADD_FAILURE() << "the all-reduce finished without rank 3";
    } catch (const CommAborted& e) {
      EXPECT_NE(std::string(e.what()).find("rank 3 gave up"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace meshtrain::comm
