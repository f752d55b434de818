// Focused tests of the backend implementation files. The collective bodies
// in collectives_test.cc and groups_test.cc run every op through them too;
// these pin down one behaviour of each file directly:
//   threads/thread_p2p.cc   send/recv matching: FIFO per (peer, tag), recvs
//                           posted before or after the send, size mismatch
//   threads/group_state.cc  per-group sequence numbers as seen in check mode
//   threads/thread_group.cc in-place all_to_all staging, non-blocking ops on
//                           the progress thread, stats recorded per op
//   bench/comm_bench.cc     alpha-beta fit, busbw factors, bound bytes,
//                           argument parsing
//   mpi/mpi_backend.cc, mpi/mpi_ops.cc, mpi/mpi_raw.cc: covered by
//                           comm_mpi_test under mpirun (collectives_test.cc
//                           and groups_test.cc with harness_mpi.cc, plus
//                           MpiRaw.SecondsArePositive there); here only the
//                           entry points that work without mpirun.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/bench/comm_bench.h"
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/comm/thread_world.h"
#include "meshtrain/core/error.h"
#include "support/run_ranks.h"

namespace meshtrain::comm {
namespace {

using meshtrain::testing::run_ranks;

// Runs fn on every rank of a fresh world; returns each rank's error text
// ("" when it returned normally). A failing rank aborts the world so its
// peers do not wait for the timeout.
std::vector<std::string> on_ranks(int R, GroupOptions opts, const std::function<void(ProcessGroup&, int)>& fn) {
  auto world = ThreadWorld::create(R, opts);
  std::vector<std::string> errors(static_cast<size_t>(R));
  run_ranks(R, [&](int r) {
    try {
      fn(*world->group(r), r);
    } catch (const std::exception& e) {
      errors[size_t(r)] = e.what();
      world->abort("rank " + std::to_string(r) + " failed");
    }
  }, std::chrono::seconds(30));
  return errors;
}

// ---- threads/thread_p2p.cc ---------------------------------------------------

TEST(ThreadP2p, BufferedMessagesAreFifoPerTagWithInterleavedTags) {
  const auto errors = on_ranks(2, {.timeout = Millis(10000)}, [](ProcessGroup& g, int r) {
    if (r == 0) {
      // All four are buffered: the receiver posts nothing before the barrier.
      for (int v : {10, 20, 11, 21}) g.send(&v, 1, DType::I32, 1, {.tag = v / 10});
      g.barrier();
    } else {
      g.barrier();
      int a = 0, b = 0, c = 0, d = 0;
      g.recv(&a, 1, DType::I32, 0, {.tag = 2});  // tag 2 first although tag 1 arrived first
      g.recv(&b, 1, DType::I32, 0, {.tag = 2});
      g.recv(&c, 1, DType::I32, 0, {.tag = 1});
      g.recv(&d, 1, DType::I32, 0, {.tag = 1});
      EXPECT_EQ(a, 20);
      EXPECT_EQ(b, 21);
      EXPECT_EQ(c, 10);
      EXPECT_EQ(d, 11);
    }
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

TEST(ThreadP2p, PostedRecvsMatchLaterSendsInOrder) {
  const auto errors = on_ranks(2, {.timeout = Millis(10000)}, [](ProcessGroup& g, int r) {
    if (r == 1) {
      double x = 0, y = 0, z = 0;
      Work wx = g.irecv(&x, 1, DType::F64, 0, {.tag = 1});
      Work wy = g.irecv(&y, 1, DType::F64, 0, {.tag = 1});
      Work wz = g.irecv(&z, 1, DType::F64, 0, {.tag = 7});
      g.barrier();  // all three are posted before any send
      wz.wait();
      wx.wait();
      wy.wait();
      EXPECT_EQ(x, 1.5);
      EXPECT_EQ(y, 2.5);
      EXPECT_EQ(z, 7.5);
    } else {
      g.barrier();
      for (double v : {7.5, 1.5, 2.5}) g.send(&v, 1, DType::F64, 1, {.tag = v == 7.5 ? 7 : 1});
    }
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

TEST(ThreadP2p, MatchingIsPerSourceRank) {
  const auto errors = on_ranks(3, {.timeout = Millis(10000)}, [](ProcessGroup& g, int r) {
    if (r > 0) {
      const int64_t v[2] = {r * 100, r * 100 + 1};
      g.send(v, 2, DType::I64, 0);
      g.barrier();
    } else {
      g.barrier();
      int64_t from2[2], from1[2];
      g.recv(from2, 2, DType::I64, 2);
      g.recv(from1, 2, DType::I64, 1);
      EXPECT_EQ(from2[0], 200);
      EXPECT_EQ(from2[1], 201);
      EXPECT_EQ(from1[0], 100);
      EXPECT_EQ(from1[1], 101);
    }
  });
  EXPECT_EQ(errors, std::vector<std::string>(3));
}

TEST(ThreadP2p, SizeMismatchIsReportedNotTruncated) {
  const auto errors = on_ranks(2, {.timeout = Millis(10000)}, [](ProcessGroup& g, int r) {
    if (r == 0) {
      const int32_t v[2] = {1, 2};
      g.send(v, 2, DType::I32, 1, {.tag = 3});
      g.barrier();
    } else {
      g.barrier();
      int32_t buf[3] = {0, 0, 0};
      try {
        g.recv(buf, 3, DType::I32, 0, {.tag = 3});
        ADD_FAILURE() << "recv of 12 bytes matched an 8-byte message";
      } catch (const CommMismatch& e) {
        EXPECT_NE(std::string(e.what()).find("expects 12 bytes, message has 8"), std::string::npos) << e.what();
      }
      EXPECT_EQ(buf[0], 0);
    }
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

// ---- threads/group_state.cc / thread_group.cc: sequence numbers --------------

TEST(GroupState, SequenceAdvancesPerCollectiveNotPerP2pOrSubgroupOp) {
  // Both ranks: barrier (seq 1), split (seq 2), sends/recvs (no seq), ops on
  // the subgroup (its own numbering), then diverging collectives at world
  // seq 3: check mode reports both fingerprints with that number.
  const auto errors = on_ranks(2, {.timeout = Millis(10000), .check = true}, [](ProcessGroup& g, int r) {
    g.barrier();
    auto sub = g.split(0, r, "sub");
    int v = r;
    if (r == 0) g.send(&v, 1, DType::I32, 1);
    else g.recv(&v, 1, DType::I32, 0);
    sub->barrier();
    sub->barrier();
    float x[4] = {1, 2, 3, 4};
    if (r == 0) g.all_reduce(x, 4, DType::F32);
    else g.broadcast(x, 4, DType::F32, 1);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[size_t(r)];
    EXPECT_NE(e.find("all_reduce(seq=3, count=4, dtype=f32, op=sum)"), std::string::npos) << e;
    EXPECT_NE(e.find("broadcast(seq=3, count=4, dtype=f32, root=1)"), std::string::npos) << e;
    EXPECT_NE(e.find("group 'world'"), std::string::npos) << e;
  }
}

TEST(GroupState, SubgroupNumbersItsOwnOpsFromOne) {
  const auto errors = on_ranks(2, {.timeout = Millis(10000), .check = true}, [](ProcessGroup& g, int r) {
    g.barrier();
    g.barrier();
    auto sub = g.split(0, r, "pair");
    double d = 1;
    if (r == 0) sub->all_reduce(&d, 1, DType::F64);
    else sub->all_reduce(&d, 1, DType::F64, ReduceOp::Max);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[size_t(r)];
    EXPECT_NE(e.find("group 'pair'"), std::string::npos) << e;
    EXPECT_NE(e.find("all_reduce(seq=1, count=1, dtype=f64, op=sum)"), std::string::npos) << e;
    EXPECT_NE(e.find("all_reduce(seq=1, count=1, dtype=f64, op=max)"), std::string::npos) << e;
  }
}

// ---- threads/thread_group.cc ---------------------------------------------------

TEST(ThreadGroupUnit, InPlaceAllToAllStagesItsInput) {
  const int R = 3;
  const auto errors = on_ranks(R, {.timeout = Millis(10000)}, [](ProcessGroup& g, int me) {
    // Two elements per peer; element k for peer p is me*100 + p*10 + k.
    std::vector<int32_t> buf(2 * R);
    for (int p = 0; p < R; ++p)
      for (int k = 0; k < 2; ++k) buf[size_t(2 * p + k)] = me * 100 + p * 10 + k;
    g.all_to_all(buf.data(), buf.data(), 2, DType::I32);
    for (int p = 0; p < R; ++p)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(buf[size_t(2 * p + k)], p * 100 + me * 10 + k) << "from " << p;
  });
  EXPECT_EQ(errors, std::vector<std::string>(R));
}

TEST(ThreadGroupUnit, NonBlockingOpsCompleteInOrderAndAreCounted) {
  const int R = 2;
  const auto errors = on_ranks(R, {.timeout = Millis(10000)}, [](ProcessGroup& g, int me) {
    g.reset_stats();
    std::vector<float> a(1000, float(me + 1));
    std::vector<float> gathered(10, -1.f);
    std::vector<float> mine(5, float(me));
    Work w1 = g.iall_reduce(a.data(), a.data(), a.size(), DType::F32);
    Work w2 = g.iall_gather(mine.data(), gathered.data(), 10, DType::F32);
    w2.wait();
    EXPECT_TRUE(w1.wait(Millis(0))) << "queued ops run in issue order";
    EXPECT_EQ(a[0], 3.f);
    EXPECT_EQ(a[999], 3.f);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(gathered[size_t(i)], float(i / 5)) << i;
    const CommStats s = g.stats();
    EXPECT_EQ(s[OpKind::AllReduce].calls, 1u);
    EXPECT_EQ(s[OpKind::AllReduce].bytes, 4000u);
    EXPECT_EQ(s[OpKind::AllGather].calls, 1u);
    EXPECT_EQ(s[OpKind::AllGather].bytes, 40u);  // the output count for all_gather
    EXPECT_EQ(s.total().calls, 2u);
  });
  EXPECT_EQ(errors, std::vector<std::string>(R));
}

// ---- mpi/*: entry points without mpirun ----------------------------------------

TEST(MpiBackendUnit, LaunchedByMpirunReadsTheLauncherEnvironment) {
  // mpi_backend.cc (or its stub): Open MPI sets OMPI_COMM_WORLD_SIZE, PMI
  // launchers PMI_SIZE. comm_test itself runs without mpirun.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")) GTEST_SKIP() << "running under a launcher";
  EXPECT_FALSE(launched_by_mpirun());
  ::setenv("PMI_SIZE", "2", 1);
  EXPECT_TRUE(launched_by_mpirun());
  ::unsetenv("PMI_SIZE");
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_TRUE(launched_by_mpirun());
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_FALSE(launched_by_mpirun());
  // Without MPI compiled in, the raw timing entry points refuse clearly.
  if (!mpi_compiled()) { EXPECT_THROW(mpi_raw_seconds(OpKind::AllReduce, 4096, 1), CommError); }
}

// ---- bench/comm_bench.cc ---------------------------------------------------------

std::vector<bench::Measurement> synthetic(OpKind op, int R, double alpha, double beta) {
  const double ka = op == OpKind::AllReduce ? 2.0 * (R - 1) : double(R - 1);
  const double kb = op == OpKind::AllReduce ? 2.0 * (R - 1) / R : double(R - 1) / R;
  std::vector<bench::Measurement> ms;
  for (size_t bytes = 4096; bytes <= (size_t(64) << 20); bytes *= 4)
    ms.push_back({op, bytes, ka * alpha + kb * double(bytes) * beta});
  return ms;
}

TEST(CommBench, AlphaBetaFitRecoversKnownModel) {
  const double alpha = 5e-6, beta = 1.0 / 20e9;  // 5 us per round, 20 GB/s
  for (OpKind op : {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter}) {
    for (int R : {2, 4, 8}) {
      auto ms = synthetic(op, R, alpha, beta);
      // Measurements of other ops and failed (non-positive) ones are ignored.
      ms.push_back({OpKind::Broadcast, 4096, 10.0});
      ms.push_back({op, 1 << 20, 0.0});
      const bench::AlphaBeta ab = bench::fit_alpha_beta(op, R, ms);
      EXPECT_NEAR(ab.alpha_s, alpha, alpha * 1e-6) << op_kind_name(op) << " R=" << R;
      EXPECT_NEAR(ab.beta_s_per_byte, beta, beta * 1e-6) << op_kind_name(op) << " R=" << R;
    }
  }
}

TEST(CommBench, AlphaBetaFitNeedsTwoSizes) {
  std::vector<bench::Measurement> one = {{OpKind::AllReduce, 4096, 1e-5}, {OpKind::AllReduce, 4096, 1e-5}};
  const auto ab = bench::fit_alpha_beta(OpKind::AllReduce, 4, one);
  EXPECT_EQ(ab.alpha_s, 0.0);
  EXPECT_EQ(ab.beta_s_per_byte, 0.0);
  EXPECT_EQ(bench::fit_alpha_beta(OpKind::AllReduce, 4, {}).alpha_s, 0.0);
}

TEST(CommBench, BusBandwidthFactorsAndBounds) {
  // busbw = algbw * 2(R-1)/R for all_reduce, (R-1)/R for RS/AG/A2A, 1 for broadcast.
  EXPECT_DOUBLE_EQ(bench::busbw_factor(OpKind::AllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bench::busbw_factor(OpKind::AllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bench::busbw_factor(OpKind::ReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(bench::busbw_factor(OpKind::AllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(bench::busbw_factor(OpKind::AllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bench::busbw_factor(OpKind::Broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bench::busbw_factor(OpKind::AllReduce, 1), 1.0);
  // Machine-wide bytes read + written for M = 100 on 4 ranks.
  EXPECT_DOUBLE_EQ(bench::bound_bytes(OpKind::AllReduce, 100, 4), 800);     // 4 inputs + 4 outputs
  EXPECT_DOUBLE_EQ(bench::bound_bytes(OpKind::ReduceScatter, 100, 4), 500); // 4 inputs + M of outputs
  EXPECT_DOUBLE_EQ(bench::bound_bytes(OpKind::AllGather, 100, 4), 500);     // M of inputs + 4 outputs
  EXPECT_DOUBLE_EQ(bench::bound_bytes(OpKind::AllToAll, 100, 4), 800);
  EXPECT_DOUBLE_EQ(bench::bound_bytes(OpKind::Broadcast, 100, 4), 400);
  EXPECT_DOUBLE_EQ(bench::bound_bytes(OpKind::Barrier, 100, 4), 0);
}

TEST(CommBench, ParseArgs) {
  const auto d = bench::parse_args({});
  EXPECT_EQ(d.backend, Backend::Threads);
  EXPECT_EQ(d.ops.size(), 5u);
  const auto o = bench::parse_args({"--ranks", "3", "--min-bytes", "4K", "--max-bytes", "16M", "--iters", "2",
                                    "--ops", "all_gather,barrier"});
  EXPECT_EQ(o.ranks, 3);
  EXPECT_EQ(o.min_bytes, 4096u);
  EXPECT_EQ(o.max_bytes, size_t(16) << 20);
  EXPECT_EQ(o.iters, 2);
  EXPECT_EQ(o.ops, (std::vector<OpKind>{OpKind::AllGather, OpKind::Barrier}));
  EXPECT_EQ(bench::parse_args({"--max-bytes", "2MiB"}).max_bytes, size_t(2) << 20);
  EXPECT_EQ(bench::parse_args({"--min-bytes", "100"}).min_bytes, 100u);

  auto fails = [](std::vector<std::string> args, const std::string& needle) {
    try {
      bench::parse_args(args);
      ADD_FAILURE() << "no error for " << args.back();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails({"--ops", "all_reduce,gossip"}, "unknown op 'gossip'");
  fails({"--ops", "send"}, "unknown op 'send'");  // point-to-point is not benchmarked
  fails({"--min-bytes", "4X"}, "bad size '4X'");
  fails({"--min-bytes", "1M", "--max-bytes", "4K"}, "bad bench options");
  fails({"--ranks", "0"}, "bad bench options");
  fails({"--iters"}, "missing value after --iters");
  fails({"--fast"}, "unknown flag '--fast'");
}

}  // namespace
}  // namespace meshtrain::comm

// ---- work.cc: the time an operation itself took ----------------------------

namespace meshtrain::comm {
namespace {

TEST(WorkTiming, BusySecondsCoverExecutionNotQueueing) {
  const auto errors = on_ranks(2, GroupOptions{}, [](ProcessGroup& g, int) {
    std::vector<float> a(1 << 20, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    Work w = g.iall_reduce(a.data(), a.data(), a.size(), DType::F32);
    w.wait();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(w.busy_seconds(), 0.0);
    EXPECT_LE(w.busy_seconds(), elapsed);
    EXPECT_EQ(a[12345], 2.0f);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_LT(Work::completed().busy_seconds(), 1e-3);  // finished as it was made
  EXPECT_EQ(Work().busy_seconds(), 0.0);
}

// What the engine counts as exposed (parallel/sync_stats.h): the wait until
// the operation ended, never more than its time in flight.
TEST(WorkTiming, AWaitExposesAtMostTheTimeInFlight) {
  // Finished before anyone waits (every operation of a group of one): the
  // wait call's own time exposes nothing.
  Work done = Work::completed();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto t0 = std::chrono::steady_clock::now();
  done.wait();
  EXPECT_EQ(done.seconds_until_done(t0), 0.0);
  EXPECT_LT(done.in_flight_seconds(), 1e-3);

  // A peer 50 ms late: the waiting rank's exposure is most of its time in flight.
  const auto errors = on_ranks(2, GroupOptions{}, [](ProcessGroup& g, int rank) {
    std::vector<float> a(1024, 1.0f);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Work w = g.iall_reduce(a.data(), a.data(), a.size(), DType::F32);
    const auto from = std::chrono::steady_clock::now();
    w.wait();
    if (rank == 0) EXPECT_GT(w.seconds_until_done(from), 0.03);
    EXPECT_LE(w.seconds_until_done(from), w.in_flight_seconds());
    EXPECT_GE(w.in_flight_seconds(), w.busy_seconds());
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace meshtrain::comm
