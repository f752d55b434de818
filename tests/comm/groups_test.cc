// Point-to-point ordering and tags, sub-groups of every mesh axis, two
// groups in flight at once, overlap with computation, accounting. Runs on
// threads and under mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "harness.h"
#include "meshtrain/comm/mesh.h"

namespace meshtrain::comm {
namespace {

using testing::for_each_rank;

// The harness passes its options to the group it builds (timeout, check
// mode): under MPI check mode is what turns a count mismatch into an error.
TEST(GroupOptionsTest, OptionsGivenToTheHarnessReachTheGroup) {
  if (!for_each_rank(2, [](ProcessGroup& g) {
        EXPECT_EQ(g.options().timeout, Millis(4321));
        EXPECT_TRUE(g.options().check);
        std::vector<float> v(16, 1.0f);
        EXPECT_THROW(g.all_reduce(v.data(), g.rank() == 1 ? 9 : 8, DType::F32), CommMismatch);
      }, GroupOptions{.timeout = Millis(4321), .check = true}))
    GTEST_SKIP();
}

TEST(PointToPoint, TagsMatchAndOrderIsFifoPerTag) {
  if (!for_each_rank(2, [](ProcessGroup& g) {
        if (g.rank() == 0) {
          for (int v : {1, 2, 3}) g.send(&v, 1, DType::I32, 1, {.tag = v == 2 ? 7 : 5});
        } else {
          int a = 0, b = 0, c = 0;
          g.recv(&b, 1, DType::I32, 0, {.tag = 7});  // tag 7 first, though sent second
          g.recv(&a, 1, DType::I32, 0, {.tag = 5});
          g.recv(&c, 1, DType::I32, 0, {.tag = 5});
          EXPECT_EQ(a, 1);
          EXPECT_EQ(b, 2);
          EXPECT_EQ(c, 3);
        }
      }))
    GTEST_SKIP();
}

TEST(PointToPoint, RingWithNonBlockingSendRecv) {
  for (int R : {2, 3, 4}) {
    if (!for_each_rank(R, [R](ProcessGroup& g) {
          const int me = g.rank(), next = (me + 1) % R, prev = (me + R - 1) % R;
          std::vector<double> out(1000, me + 0.5), in(1000, -1);
          Work r = g.irecv(in.data(), in.size(), DType::F64, prev, {.tag = 3});
          Work s = g.isend(out.data(), out.size(), DType::F64, next, {.tag = 3});
          r.wait();
          s.wait();
          for (double v : in) ASSERT_EQ(v, prev + 0.5);
          // Zero-length messages are legal.
          Work r0 = g.irecv(nullptr, 0, DType::F32, prev);
          g.send(nullptr, 0, DType::F32, next);
          r0.wait();
        }))
      GTEST_SKIP();
  }
}

TEST(Groups, SplitOrdersByKeyAndExcludesNegativeColor) {
  if (!for_each_rank(4, [](ProcessGroup& g) {
        const int me = g.rank();
        // Evens in reverse order; rank 3 opts out.
        auto sub = g.split(me == 3 ? -1 : me % 2, -me, "sub");
        if (me == 3) {
          EXPECT_EQ(sub, nullptr);
          return;
        }
        ASSERT_NE(sub, nullptr);
        if (me % 2 == 0) {
          EXPECT_EQ(sub->size(), 2);
          EXPECT_EQ(sub->rank(), me == 2 ? 0 : 1);
        } else {
          EXPECT_EQ(sub->size(), 1);
        }
        int v = me, sum = 0;
        sub->all_reduce(&v, &sum, 1, DType::I32);
        EXPECT_EQ(sum, me % 2 == 0 ? 2 : 1);
      }))
    GTEST_SKIP();
}

// A tp collective and a dp collective in flight at once on the same ranks.
TEST(Groups, TwoGroupsConcurrently) {
  if (!for_each_rank(4, [](ProcessGroup& g) {
        const int me = g.rank();
        auto tp = g.split(me / 2, me, "tp");  // {0,1} {2,3}
        auto dp = g.split(me % 2, me, "dp");  // {0,2} {1,3}
        const size_t n = 100000;
        std::vector<float> a(n, float(me)), b(n, float(10 * me));
        for (int round = 0; round < 3; ++round) {
          std::fill(a.begin(), a.end(), float(me));
          std::fill(b.begin(), b.end(), float(10 * me));
          Work wt = tp->iall_reduce(a.data(), a.data(), n, DType::F32);
          Work wd = dp->iall_reduce(b.data(), b.data(), n, DType::F32);
          wd.wait();
          wt.wait();
          const float tp_sum = float((me / 2) * 4 + 1), dp_sum = float(10 * ((me % 2) * 2 + 2));
          ASSERT_EQ(a[0], tp_sum);
          ASSERT_EQ(a[n - 1], tp_sum);
          ASSERT_EQ(b[n / 2], dp_sum);
        }
      }))
    GTEST_SKIP();
}

TEST(Groups, AsyncOverlapsComputation) {
  if (!for_each_rank(4, [](ProcessGroup& g) {
        const size_t n = 1 << 20;
        std::vector<float> grad(n, 1.0f);
        Work w = g.iall_reduce(grad.data(), grad.data(), n, DType::F32, ReduceOp::Avg);
        double acc = 0;  // computation that does not touch the buffer
        for (int i = 1; i < 200000; ++i) acc += std::sqrt(double(i));
        EXPECT_GT(acc, 0);
        w.wait();
        EXPECT_EQ(grad[0], 1.0f);
        EXPECT_EQ(grad[n - 1], 1.0f);
        const CommStats s = g.stats();
        EXPECT_EQ(s[OpKind::AllReduce].calls, 1u);
        EXPECT_EQ(s[OpKind::AllReduce].bytes, n * 4);
        EXPECT_GE(s[OpKind::AllReduce].call_s, s[OpKind::AllReduce].wait_s);
        g.reset_stats();
        EXPECT_EQ(g.stats().total().calls, 0u);
        g.barrier();
        EXPECT_EQ(g.stats()[OpKind::Barrier].calls, 1u);
      }))
    GTEST_SKIP();
}

TEST(TensorOverloads, AllReduceReduceScatterAllGatherBroadcast) {
  if (!for_each_rank(3, [](ProcessGroup& g) {
        auto alloc = CachingAllocator::create();
        const int me = g.rank();
        Tensor t = tensor_from<float>({1.0f * me, 2.0f, 3.0f, 4.0f, 5.0f}, Shape{5}, alloc);
        g.all_reduce(t);
        EXPECT_EQ(to_vector<float>(t), (std::vector<float>{3, 6, 9, 12, 15}));
        // 5 elements over 3 ranks: chunks of 2, 2, 1.
        Tensor part = Tensor::zeros(Shape{int64_t(chunk_size(5, 3, me))}, DType::F32, alloc, MemCategory::Other);
        g.reduce_scatter(t, part, ReduceOp::Max);
        EXPECT_EQ(to_vector<float>(part)[0], float(3 * (chunk_offset(5, 3, me) + 1)));
        Tensor full = Tensor::zeros(Shape{5}, DType::F32, alloc, MemCategory::Other);
        g.all_gather(part, full);
        EXPECT_EQ(to_vector<float>(full), (std::vector<float>{3, 6, 9, 12, 15}));
        Tensor wrong = Tensor::zeros(Shape{4}, DType::F32, alloc, MemCategory::Other);
        EXPECT_THROW(g.all_gather(wrong, full), CommError);  // checked before any communication
        Tensor b = tensor_from<int64_t>({me == 1 ? int64_t(42) : int64_t(0)}, Shape{1}, alloc);
        g.broadcast(b, 1);
        EXPECT_EQ(to_vector<int64_t>(b)[0], 42);
      }))
    GTEST_SKIP();
}

// The MeshGroups tests' mesh: 8 ranks on threads, 4 under mpirun.
int mesh_ranks() { return testing::mpi_mode() ? 4 : 8; }
MeshShape test_mesh(int ranks) {
  return ranks == 8 ? MeshShape{.pp = 2, .dp = 2, .cp = 1, .tp = 2, .ep = 2}
                    : MeshShape{.pp = 1, .dp = 2, .cp = 1, .tp = 2, .ep = 2};
}
// fn on every rank of that mesh, with the mesh made over the harness's group.
bool for_each_mesh_rank(const std::function<void(ProcessGroup&, Mesh&)>& fn, GroupOptions options = {}) {
  const int R = mesh_ranks();
  return for_each_rank(R, [&](ProcessGroup& g) {
    std::shared_ptr<ProcessGroup> world(&g, [](ProcessGroup*) {});
    Mesh mesh = Mesh::create(test_mesh(R), world);
    fn(g, mesh);
  }, options);
}
const std::vector<Axis> kDenseAxes{Axis::Pp, Axis::Dp, Axis::Cp, Axis::Tp};
// Every single axis, every pair, ep and edp.
std::vector<Axes> every_group() {
  std::vector<Axes> sets;
  for (Axis a : kDenseAxes) sets.push_back(a);
  for (size_t i = 0; i < kDenseAxes.size(); ++i)
    for (size_t j = i + 1; j < kDenseAxes.size(); ++j) sets.push_back(kDenseAxes[j] | kDenseAxes[i]);
  sets.push_back(Axis::Ep);
  sets.push_back(Axis::Edp);
  return sets;
}

// Every single axis and every pair: the group holds exactly the ranks that
// agree on all other coordinates, ordered by the axis coordinates.
TEST(MeshGroups, EveryAxisAndPair) {
  const int R = mesh_ranks();
  const MeshShape shape = test_mesh(R);
  if (!for_each_mesh_rank([&](ProcessGroup& g, Mesh& mesh) {
        const MeshCoords me = shape.coords(g.rank());
        for (Axes set : every_group()) {
          ProcessGroup& sub = mesh.group(set);
          EXPECT_EQ(sub.name(), set.key());
          int64_t sum = 0, count = 0;
          for (int r = 0; r < R; ++r) {
            const MeshCoords c = shape.coords(r);
            bool same = true;
            if (set == Axes(Axis::Ep) || set == Axes(Axis::Edp)) {
              same = c[Axis::Pp] == me[Axis::Pp] && c[Axis::Tp] == me[Axis::Tp] &&
                     (set == Axes(Axis::Ep) ? c[Axis::Edp] == me[Axis::Edp] : c[Axis::Ep] == me[Axis::Ep]);
            } else {
              for (Axis a : kDenseAxes)
                if (!set.has(a) && c[a] != me[a]) same = false;
            }
            if (same) sum += r, ++count;
          }
          ASSERT_EQ(sub.size(), count) << set.key();
          int64_t v = g.rank(), got = 0;
          sub.all_reduce(&v, &got, 1, DType::I64);
          ASSERT_EQ(got, sum) << set.key();
        }
        EXPECT_EQ(mesh.group(Axis::Tp).rank(), me[Axis::Tp]);
        EXPECT_EQ(mesh.coord(Axis::Dp), me[Axis::Dp]);
        EXPECT_EQ(&mesh.group("pp+tp"), &mesh.group(Axis::Pp | Axis::Tp));  // by name, for tools
      }))
    GTEST_SKIP();
}

// Every group is made when the mesh is, in one order on every rank; looking
// one up is local. So ranks may look groups up in different orders, or not
// at all, without a deadlock (sub-communicators made lazily, in the order
// each rank first asked, deadlocked elsewhere); then every group and the
// world still work.
TEST(MeshGroups, LookingGroupsUpInAnyOrderPerRankCreatesNothing) {
  if (!for_each_mesh_rank([&](ProcessGroup& g, Mesh& mesh) {
        const std::vector<Axes> sets = every_group();
        std::vector<Axes> order = sets;
        if (g.rank() % 2 == 1) std::reverse(order.begin(), order.end());
        if (g.rank() == 0) order.pop_back();  // never asks for edp before using it
        for (const auto& set : order) EXPECT_GE(mesh.group(set).size(), 1);
        for (const auto& set : sets) {
          ProcessGroup& sub = mesh.group(set);
          int64_t one = 1, members = 0;
          sub.all_reduce(&one, &members, 1, DType::I64);
          EXPECT_EQ(members, sub.size()) << set.key();
        }
        int64_t one = 1, everyone = 0;
        g.all_reduce(&one, &everyone, 1, DType::I64);
        EXPECT_EQ(everyone, g.size());
      }, GroupOptions{.timeout = Millis(10000), .check = true}))
    GTEST_SKIP();
}

}  // namespace
}  // namespace meshtrain::comm
