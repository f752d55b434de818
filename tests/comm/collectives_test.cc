// Covers src/meshtrain/comm/mpi/mpi_group.cc and comm/mpi/mpi_work.cc under mpirun (comm_mpi_test),
// comm/threads/async_ops.cc on threads (non-blocking collectives).
// Every op x dtype x group size 1-8 x counts (0, 1, non-divisible) against
// a serial reference; in-place forms. Runs on threads and under mpirun.
// Under mpirun (comm_mpi_test, harness_mpi.cc) these bodies are what covers
// the MPI backend: mpi/mpi_backend.cc (mpi_world, groups, split),
// mpi/mpi_ops.cc (every collective and send/recv) and mpi/mpi_raw.cc (the
// raw-call timings checked by MpiRaw below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "harness.h"
#include "meshtrain/comm/mpi_world.h"

namespace meshtrain::comm {
namespace {

using testing::for_each_rank;
using testing::get;
using testing::make_buffer;
using testing::round_to;

const DType kDTypes[] = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

// Small integers: exact in every dtype (bf16 up to 256), so any summation
// order gives the same bits and MPI results compare exactly too.
double value(int rank, size_t i) { return double(int((rank * 7 + i * 3) % 23) - 11); }

std::vector<size_t> counts_for(int R) { return {0, 1, 5, size_t(R) + 1, 1031}; }

// Serial reference in the accumulation type: f32 for bf16.
double reference(DType dt, ReduceOp op, int R, size_t i) {
  double acc = value(0, i);
  for (int r = 1; r < R; ++r) {
    const double v = value(r, i);
    if (op == ReduceOp::Max) acc = std::max(acc, v);
    else if (op == ReduceOp::Min) acc = std::min(acc, v);
    else acc += v;
  }
  if (op != ReduceOp::Avg) return round_to(dt, acc);
  switch (dt) {
    case DType::F32: return float(acc) / float(R);
    case DType::BF16: return round_to(dt, float(acc) / float(R));
    case DType::F64: return acc / R;
    default: return double(int64_t(acc) / R);
  }
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduce) {
  const int R = GetParam();
  if (!for_each_rank(R, [&](ProcessGroup& g) {
        for (DType dt : kDTypes)
          for (ReduceOp op : kOps)
            for (size_t n : counts_for(R))
              for (bool in_place : {false, true}) {
                auto send = make_buffer(dt, n, [&](size_t i) { return value(g.rank(), i); });
                auto recv = make_buffer(dt, n, [](size_t) { return -99; });
                auto& out = in_place ? send : recv;
                g.all_reduce(send.data(), out.data(), n, dt, op);
                for (size_t i = 0; i < n; ++i)
                  ASSERT_EQ(get(dt, out, i), reference(dt, op, R, i))
                      << dtype_name(dt) << " " << reduce_op_name(op) << " n=" << n << " i=" << i
                      << " in_place=" << in_place;
              }
      }))
    GTEST_SKIP() << "needs " << R << " ranks";
}

TEST_P(Collectives, ReduceScatter) {
  const int R = GetParam();
  if (!for_each_rank(R, [&](ProcessGroup& g) {
        for (DType dt : kDTypes)
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max})
            for (size_t n : counts_for(R))
              for (bool in_place : {false, true}) {
                const size_t off = chunk_offset(n, R, g.rank()), m = chunk_size(n, R, g.rank());
                auto send = make_buffer(dt, n, [&](size_t i) { return value(g.rank(), i); });
                auto recv = make_buffer(dt, m, [](size_t) { return -99; });
                char* out = in_place ? send.data() + off * dtype_size(dt) : recv.data();
                g.reduce_scatter(send.data(), out, n, dt, op);
                std::vector<char> got(out, out + m * dtype_size(dt));
                for (size_t i = 0; i < m; ++i)
                  ASSERT_EQ(get(dt, got, i), reference(dt, op, R, off + i))
                      << dtype_name(dt) << " n=" << n << " i=" << i << " in_place=" << in_place;
              }
      }))
    GTEST_SKIP();
}

TEST_P(Collectives, AllGather) {
  const int R = GetParam();
  if (!for_each_rank(R, [&](ProcessGroup& g) {
        for (DType dt : kDTypes)
          for (size_t n : counts_for(R))
            for (bool in_place : {false, true}) {
              const size_t off = chunk_offset(n, R, g.rank()), m = chunk_size(n, R, g.rank());
              // Element i of the result comes from the rank owning chunk i.
              auto owner_value = [&](size_t i) {
                int owner = 0;
                while (i >= chunk_offset(n, R, owner) + chunk_size(n, R, owner)) ++owner;
                return value(owner, i);
              };
              auto recv = make_buffer(dt, n, [&](size_t i) { return in_place && i >= off && i < off + m ? value(g.rank(), i) : -99; });
              auto send = make_buffer(dt, m, [&](size_t i) { return value(g.rank(), off + i); });
              const char* sp = in_place ? recv.data() + off * dtype_size(dt) : send.data();
              g.all_gather(sp, recv.data(), n, dt);
              for (size_t i = 0; i < n; ++i)
                ASSERT_EQ(get(dt, recv, i), round_to(dt, owner_value(i))) << dtype_name(dt) << " n=" << n << " i=" << i;
            }
      }))
    GTEST_SKIP();
}

TEST_P(Collectives, AllToAllWithCounts) {
  const int R = GetParam();
  if (!for_each_rank(R, [&](ProcessGroup& g) {
        const int me = g.rank();
        auto cnt = [](int from, int to) { return size_t((from + 2 * to) % 3); };  // includes zeros
        for (DType dt : kDTypes) {
          std::vector<size_t> sc(static_cast<size_t>(R)), rc(static_cast<size_t>(R));
          size_t ns = 0, nr = 0;
          for (int p = 0; p < R; ++p) ns += sc[size_t(p)] = cnt(me, p), nr += rc[size_t(p)] = cnt(p, me);
          // Element k of the block for peer p encodes (sender, receiver, k).
          std::vector<double> vals;
          for (int p = 0; p < R; ++p)
            for (size_t k = 0; k < sc[size_t(p)]; ++k) vals.push_back(me * 16 + p * 4 + double(k));
          auto send = make_buffer(dt, ns, [&](size_t i) { return vals[i]; });
          auto recv = make_buffer(dt, nr, [](size_t) { return -1; });
          g.all_to_all(send.data(), sc, recv.data(), rc, dt);
          size_t i = 0;
          for (int p = 0; p < R; ++p)
            for (size_t k = 0; k < rc[size_t(p)]; ++k, ++i)
              ASSERT_EQ(get(dt, recv, i), round_to(dt, p * 16 + me * 4 + double(k))) << dtype_name(dt);
          // In place, equal split.
          auto buf = make_buffer(dt, 2 * size_t(R), [&](size_t j) { return me * 16 + double(j); });
          g.all_to_all(buf.data(), buf.data(), 2, dt);
          for (int p = 0; p < R; ++p)
            for (size_t k = 0; k < 2; ++k)
              ASSERT_EQ(get(dt, buf, size_t(p) * 2 + k), round_to(dt, p * 16 + me * 2 + double(k)));
        }
      }))
    GTEST_SKIP();
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const int R = GetParam();
  if (!for_each_rank(R, [&](ProcessGroup& g) {
        for (DType dt : kDTypes)
          for (int root = 0; root < R; ++root)
            for (size_t n : counts_for(R)) {
              auto buf = make_buffer(dt, n, [&](size_t i) { return g.rank() == root ? value(root, i) : -99; });
              g.broadcast(buf.data(), n, dt, root);
              for (size_t i = 0; i < n; ++i) ASSERT_EQ(get(dt, buf, i), round_to(dt, value(root, i)));
            }
      }))
    GTEST_SKIP();
}

TEST_P(Collectives, NonBlockingFormsAndBarrier) {
  const int R = GetParam();
  if (!for_each_rank(R, [&](ProcessGroup& g) {
        const size_t n = 4099;
        auto a = make_buffer(DType::F32, n, [&](size_t i) { return value(g.rank(), i); });
        auto b = make_buffer(DType::I64, n, [&](size_t i) { return value(g.rank(), i); });
        Work wa = g.iall_reduce(a.data(), a.data(), n, DType::F32);
        Work wb = g.iall_reduce(b.data(), b.data(), n, DType::I64, ReduceOp::Max);
        Work wc = g.ibarrier();
        wa.wait();
        wb.wait();
        wc.wait();
        EXPECT_TRUE(wa.is_completed());
        EXPECT_EQ(wa.state(), WorkState::Done);
        EXPECT_EQ(wa.error(), nullptr);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(get(DType::F32, a, i), reference(DType::F32, ReduceOp::Sum, R, i));
          ASSERT_EQ(get(DType::I64, b, i), reference(DType::I64, ReduceOp::Max, R, i));
        }
        g.barrier();
      }))
    GTEST_SKIP();
}

// Large counts take the work-sharing path (pieces claimed by whichever rank
// runs) and, above a few MiB, streaming stores; results must not change.
TEST_P(Collectives, LargeCountsAllReduceReduceScatterAllGather) {
  const int R = GetParam();
  if (!for_each_rank(R, [&](ProcessGroup& g) {
        struct Case { DType dt; size_t n; };
        for (Case c : {Case{DType::F32, 140001}, Case{DType::BF16, 140001}, Case{DType::I64, 70001},
                       Case{DType::F32, 1100003}})
          for (bool in_place : {false, true}) {
            if (c.n > 1000000 && (R > 3 || in_place)) continue;  // keep the suite fast (TSan too)
            const DType dt = c.dt;
            const size_t n = c.n, es = dtype_size(dt);
            auto send = make_buffer(dt, n, [&](size_t i) { return value(g.rank(), i); });
            auto recv = make_buffer(dt, n, [](size_t) { return -99; });
            g.all_reduce(send.data(), in_place ? send.data() : recv.data(), n, dt);
            auto& out = in_place ? send : recv;
            for (size_t i = 0; i < n; i += 7) ASSERT_EQ(get(dt, out, i), reference(dt, ReduceOp::Sum, R, i));
            ASSERT_EQ(get(dt, out, n - 1), reference(dt, ReduceOp::Sum, R, n - 1));

            const size_t off = chunk_offset(n, R, g.rank()), m = chunk_size(n, R, g.rank());
            auto rs_in = make_buffer(dt, n, [&](size_t i) { return value(g.rank(), i); });
            auto rs_out = make_buffer(dt, m, [](size_t) { return -99; });
            char* rp = in_place ? rs_in.data() + off * es : rs_out.data();
            g.reduce_scatter(rs_in.data(), rp, n, dt, ReduceOp::Avg);
            std::vector<char> got(rp, rp + m * es);
            for (size_t i = 0; i < m; i += 5) ASSERT_EQ(get(dt, got, i), reference(dt, ReduceOp::Avg, R, off + i));

            auto ag_out = make_buffer(dt, n, [&](size_t i) { return i >= off && i < off + m ? value(g.rank(), i) : -99; });
            auto ag_in = make_buffer(dt, m, [&](size_t i) { return value(g.rank(), off + i); });
            g.all_gather(in_place ? ag_out.data() + off * es : ag_in.data(), ag_out.data(), n, dt);
            for (int o = 0; o < R; ++o) {
              const size_t b = chunk_offset(n, R, o), e = b + chunk_size(n, R, o);
              for (size_t i = b; i < e; i += 11) ASSERT_EQ(get(dt, ag_out, i), round_to(dt, value(o, i)));
              if (e > b) { ASSERT_EQ(get(dt, ag_out, e - 1), round_to(dt, value(o, e - 1))); }
            }
          }
      }))
    GTEST_SKIP();
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, Collectives, ::testing::Range(1, 9));

// mpi/mpi_raw.cc: median over iterations of the slowest rank's raw MPI
// call; collective over MPI_COMM_WORLD, so only meaningful under mpirun.
TEST(MpiRaw, SecondsArePositiveAndBounded) {
  if (!testing::mpi_mode()) GTEST_SKIP() << "raw MPI timings need mpirun (comm_mpi_test)";
  for (OpKind k : {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::AllToAll,
                   OpKind::Broadcast, OpKind::Barrier}) {
    const double s = mpi_raw_seconds(k, 4096, 3);
    EXPECT_GT(s, 0.0) << op_kind_name(k);
    EXPECT_LT(s, 10.0) << op_kind_name(k);
  }
}

}  // namespace
}  // namespace meshtrain::comm
