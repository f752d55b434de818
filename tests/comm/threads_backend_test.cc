// Threads backend only: bitwise determinism, failure as a group event
// (throw, mismatch, missing rank, abort), launch helpers, mesh arithmetic.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "meshtrain/comm/launch.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/comm/thread_world.h"
#include "support/run_ranks.h"

namespace meshtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;
using meshtrain::testing::run_ranks;

std::vector<float> random_floats(int rank, size_t n) {
  std::mt19937 gen(1234 + rank);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(ThreadsDeterminism, SumIsBitwiseTheSerialRankOrderedSum) {
  for (int R : {2, 3, 5, 8}) {
    const size_t n = 10007;
    std::vector<float> serial = random_floats(0, n);
    for (int r = 1; r < R; ++r) {
      auto v = random_floats(r, n);
      for (size_t i = 0; i < n; ++i) serial[i] += v[i];  // ((x0 + x1) + x2) + ...
    }
    std::vector<uint16_t> serial_bf(n);
    {
      std::vector<float> acc(n, 0.0f);
      for (int r = 0; r < R; ++r) {
        auto v = random_floats(r, n);
        for (size_t i = 0; i < n; ++i) {
          const float x = float(bf16(v[i]));
          acc[i] = r == 0 ? x : acc[i] + x;  // bf16 accumulates in f32
        }
      }
      for (size_t i = 0; i < n; ++i) serial_bf[i] = bf16(acc[i]).bits;
    }
    testing::for_each_rank(R, [&](ProcessGroup& g) {
      for (int rep = 0; rep < 3; ++rep) {
        auto v = random_floats(g.rank(), n);
        g.all_reduce(v.data(), n, DType::F32);
        ASSERT_EQ(std::memcmp(v.data(), serial.data(), n * 4), 0) << "R=" << R;
        auto w = random_floats(g.rank(), n);
        std::vector<uint16_t> b(n);
        for (size_t i = 0; i < n; ++i) b[i] = bf16(w[i]).bits;
        g.all_reduce(b.data(), n, DType::BF16);
        ASSERT_EQ(std::memcmp(b.data(), serial_bf.data(), n * 2), 0) << "bf16 R=" << R;
      }
    });
  }
}

// A data-parallel group of one reduces every step: in place, that is the
// identity, so the buffer is not even written (a read-only page proves it;
// writing it would fault). Out of place, recv gets send's bits.
TEST(ThreadsGroupOfOne, InPlaceCollectivesDoNotTouchTheBuffer) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), n = page / sizeof(float);
  void* mem = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* buf = static_cast<float*>(mem);
  const std::vector<float> values = random_floats(0, n);
  std::memcpy(buf, values.data(), page);
  ASSERT_EQ(mprotect(mem, page, PROT_READ), 0);
  testing::for_each_rank(1, [&](ProcessGroup& g) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) g.all_reduce(buf, n, DType::F32, op);
    g.reduce_scatter(buf, buf, n, DType::F32);
    g.all_gather(buf, buf, n, DType::F32);
    std::vector<float> out(n);
    g.all_reduce(buf, out.data(), n, DType::F32, ReduceOp::Avg);
    EXPECT_EQ(std::memcmp(out.data(), values.data(), page), 0);
  });
  EXPECT_EQ(std::memcmp(buf, values.data(), page), 0);
  munmap(mem, page);
}

// Runs fn on R ranks of a fresh world with a short timeout and returns
// each rank's error message ("" if it returned normally).
std::vector<std::string> run_failing(int R, Millis timeout, const std::function<void(ProcessGroup&, int)>& fn,
                                     bool check = false) {
  auto world = ThreadWorld::create(R, GroupOptions{.timeout = timeout, .check = check});
  std::vector<std::string> errors(static_cast<size_t>(R));
  run_ranks(R, [&](int r) {
    try {
      fn(*world->group(r), r);
    } catch (const CommError& e) {
      errors[size_t(r)] = e.what();
      world->abort(std::string("rank ") + std::to_string(r) + " failed: " + e.what());
    } catch (const std::exception& e) {
      errors[size_t(r)] = std::string("other: ") + e.what();
      world->abort(std::string("rank ") + std::to_string(r) + " failed: " + e.what());
    }
  }, std::chrono::seconds(30));
  return errors;
}

TEST(ThreadsFailure, RankThrowsMidCollectivePeersGetAborted) {
  const auto t0 = Clock::now();
  auto errors = run_failing(4, Millis(20000), [](ProcessGroup& g, int r) {
    std::vector<float> v(1000, 1.0f);
    g.all_reduce(v.data(), v.size(), DType::F32);  // seq 1 succeeds
    if (r == 2) throw std::runtime_error("injected failure");
    g.all_reduce(v.data(), v.size(), DType::F32);  // seq 2: rank 2 never comes
  });
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "abort must wake peers long before the timeout";
  EXPECT_NE(errors[2].find("injected failure"), std::string::npos);
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[size_t(r)].find("group 'world'"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("all_reduce(seq=2"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("injected failure"), std::string::npos) << errors[size_t(r)];
    // Who else had arrived depends on timing; the failed rank never does.
    const auto na = errors[size_t(r)].find("not arrived:");
    ASSERT_NE(na, std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("2 (world rank 2)", na), std::string::npos) << errors[size_t(r)];
  }
}

TEST(ThreadsFailure, MismatchedCountNamesBothFingerprints) {
  auto errors = run_failing(3, Millis(10000), [](ProcessGroup& g, int r) {
    std::vector<float> v(16, 1.0f);
    g.all_reduce(v.data(), r == 1 ? 9 : 8, DType::F32);
  }, /*check=*/true);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[size_t(r)].find("mismatch"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("count=9"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("count=8"), std::string::npos) << errors[size_t(r)];
  }
}

TEST(ThreadsFailure, MismatchedOpIsReportedNotHung) {
  auto errors = run_failing(2, Millis(10000), [](ProcessGroup& g, int r) {
    std::vector<double> v(8, 1.0);
    if (r == 0) g.all_reduce(v.data(), 8, DType::F64);
    else g.broadcast(v.data(), 8, DType::F64, 0);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[size_t(r)].find("all_reduce(seq=1"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("broadcast(seq=1"), std::string::npos) << errors[size_t(r)];
  }
}

TEST(ThreadsFailure, MissingRankTimesOutNamingIt) {
  const auto t0 = Clock::now();
  auto errors = run_failing(3, Millis(300), [](ProcessGroup& g, int r) {
    if (r == 2) return;  // never arrives
    g.barrier();
  });
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  for (int r : {0, 1}) {
    EXPECT_NE(errors[size_t(r)].find("barrier(seq=1"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("2 (world rank 2)"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("timed out"), std::string::npos) << errors[size_t(r)];
  }
  EXPECT_EQ(errors[2], "");
}

TEST(ThreadsFailure, AsyncOpTimesOutThroughWait) {
  auto errors = run_failing(2, Millis(200), [](ProcessGroup& g, int r) {
    if (r == 1) return;
    float x = 1;
    Work w = g.iall_reduce(&x, &x, 1, DType::F32);
    EXPECT_FALSE(w.wait(Millis(10)));
    w.wait();
  });
  EXPECT_NE(errors[0].find("timed out"), std::string::npos) << errors[0];
}

TEST(ThreadsFailure, RecvWithoutSendTimesOut) {
  auto errors = run_failing(2, Millis(200), [](ProcessGroup& g, int r) {
    if (r == 0) {
      int x;
      g.recv(&x, 1, DType::I32, 1, {.tag = 4});
    }
  });
  EXPECT_NE(errors[0].find("recv"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("timed out"), std::string::npos) << errors[0];
}

// Rank 0 aborts once the others are on their way into a barrier it never
// joins (an explicit count, not a sleep): whether a peer is already blocked
// or arrives after the abort, it fails with the reason, long before the
// 20 s timeout.
TEST(ThreadsFailure, AbortWakesEveryone) {
  std::mutex mu;
  std::condition_variable cv;
  int entering = 0;
  const auto t0 = Clock::now();
  auto errors = run_failing(4, Millis(20000), [&](ProcessGroup& g, int r) {
    if (r == 0) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return entering == 3; });
      lock.unlock();
      g.abort("operator stop");
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      ++entering;
    }
    cv.notify_all();
    g.barrier();
  });
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  for (int r : {1, 2, 3}) EXPECT_NE(errors[size_t(r)].find("operator stop"), std::string::npos) << errors[size_t(r)];
}

TEST(Launch, ThreadsGivesContextsAndPropagatesFirstError) {
  std::atomic<int> seen{0};
  LaunchOptions o;
  o.world_size = 4;
  o.mesh = MeshShape{.dp = 2, .tp = 2};
  launch_threads(o, [&](ParallelContext& ctx) {
    EXPECT_EQ(ctx.world_size, 4);
    EXPECT_EQ(ctx.group("tp").size(), 2);
    EXPECT_EQ(ctx.group({"dp", "tp"}).size(), 4);
    EXPECT_NE(ctx.allocator, nullptr);
    int one = 1, sum = 0;
    ctx.world->all_reduce(&one, &sum, 1, DType::I32);
    EXPECT_EQ(sum, 4);
    seen += 1;
  });
  EXPECT_EQ(seen.load(), 4);
  const auto t0 = Clock::now();
  try {
    launch_threads(3, [](ParallelContext& ctx) {
      if (ctx.rank == 1) throw ConfigError("bad thing on rank 1");
      ctx.world->barrier();
    });
    FAIL() << "expected the rank's error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad thing on rank 1"), std::string::npos);
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

// A rank fails while its peers have a non-blocking op in flight on a mesh
// group: the launcher must abort before tearing the groups down.
TEST(Launch, FailureWithAsyncOpInFlightDoesNotHang) {
  const auto t0 = Clock::now();
  LaunchOptions o;
  o.world_size = 4;
  o.mesh = MeshShape{.dp = 2, .tp = 2};
  EXPECT_THROW(launch_threads(o, [](ParallelContext& ctx) {
                 std::vector<float> v(1000, 1.0f);
                 Work w = ctx.group("dp").iall_reduce(v.data(), v.data(), v.size(), DType::F32);
                 if (ctx.rank == 3) throw DataError("rank 3 broke");
                 w.wait();
                 ctx.world->barrier();
               }),
               DataError);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(MeshShapeTest, ValidationShowsTheProduct) {
  try {
    MeshShape{.pp = 2, .dp = 3, .cp = 1, .tp = 2}.validate(8);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("2*3*1*2 = 12"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("8 ranks"), std::string::npos) << e.what();
  }
  EXPECT_THROW((MeshShape{.dp = 3, .cp = 1, .tp = 1, .ep = 2}.validate(3)), ConfigError);
  EXPECT_NO_THROW((MeshShape{.dp = 2, .cp = 2, .tp = 2, .ep = 4}.validate(8)));  // ep not in the product
}

TEST(MeshShapeTest, TpIsInnermostAndExpertAxisIsCarvedFromDpCp) {
  const MeshShape s{.pp = 2, .dp = 2, .cp = 2, .tp = 2, .ep = 2};
  auto c = s.coords(13);  // 13 = ((1*2 + 1)*2 + 0)*2 + 1
  EXPECT_EQ(c[Axis::Pp], 1);
  EXPECT_EQ(c[Axis::Dp], 1);
  EXPECT_EQ(c[Axis::Cp], 0);
  EXPECT_EQ(c[Axis::Tp], 1);
  EXPECT_EQ(c[Axis::Ep], 0);   // i = dp*cp_size + cp = 2; 2 % 2
  EXPECT_EQ(c[Axis::Edp], 1);  // 2 / 2
  EXPECT_EQ(s.rank_of(c), 13);
  EXPECT_EQ(s.coords(1)[Axis::Tp], 1);
  EXPECT_EQ(s.world_size(), 16);
  EXPECT_EQ(s.size(Axis::Edp), 2);
  // A group's members in group rank order: the ranks agreeing off the set.
  EXPECT_EQ(s.members(13, Axis::Tp), (std::vector<int>{12, 13}));
  EXPECT_EQ(s.members(13, Axis::Pp | Axis::Tp), (std::vector<int>{4, 5, 12, 13}));
  EXPECT_EQ(s.members(13, Axis::Ep), (std::vector<int>{13, 15}));  // pp 1, tp 1, edp 1: dp*cp index 2, 3
  EXPECT_EQ(s.members(13, Axis::Edp), (std::vector<int>{9, 13}));   // ep 0: dp*cp index 0, 2
  EXPECT_EQ(Axes::parse("pp+tp"), Axis::Pp | Axis::Tp);
  EXPECT_EQ((Axis::Tp | Axis::Pp).key(), "pp+tp");
  EXPECT_THROW(Axes::parse("pp+xx"), ConfigError);
}

TEST(Backends, MpiEntryPointsExistWithoutIfdefs) {
  // Either the real backend or the stub; both link.
  if (!mpi_compiled()) {
    EXPECT_THROW(mpi_world(), CommError);
  }
  EXPECT_EQ(parse_backend("mpi"), Backend::Mpi);
  EXPECT_THROW(parse_backend("nccl"), ConfigError);
}

}  // namespace
}  // namespace meshtrain::comm
