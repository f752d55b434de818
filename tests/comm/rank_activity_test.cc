// The rank activity the collectives record (core/rank_activity.h): time
// inside collective calls, blocking or waited, counted once when nested;
// "waiting" while inside; progress on the way in and out.
#include "meshtrain/core/rank_activity.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "meshtrain/comm/launch.h"

namespace meshtrain::comm {
namespace {

TEST(RankActivity, CollectivesCountTheTimeARankWaitsForItsPeers) {
  activity::RankActivity records[2];
  std::atomic<bool> rank0_waiting{false};
  launch_threads(2, [&](ParallelContext& ctx) {
    activity::RankActivity& mine = records[ctx.rank];
    const activity::Bind bind(&mine);
    activity::set_step(7);
    activity::mark("forward");
    int32_t x = 1;
    if (ctx.rank == 1) {
      // Rank 0 is inside the all-reduce, waiting: not hung.
      const auto t0 = std::chrono::steady_clock::now();
      while (records[0].collective_depth.load() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      rank0_waiting = records[0].collective_depth.load() > 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    ctx.world->all_reduce(&x, 1, DType::I32);  // blocking
    Work w = ctx.world->iall_reduce(&x, &x, 1, DType::I32);
    w.wait();  // waited: counted too
  });
  EXPECT_TRUE(rank0_waiting);
  EXPECT_GE(records[0].collective_ns.load() * 1e-9, 0.14) << "rank 0 waited ~150 ms for rank 1";
  EXPECT_LT(records[1].collective_ns.load() * 1e-9, 0.1) << "rank 1 arrived last and hardly waited";
  for (auto& r : records) {
    EXPECT_EQ(r.collective_depth.load(), 0);
    EXPECT_EQ(r.step.load(), 7);
    EXPECT_STREQ(r.phase.load(), "forward");
    EXPECT_GE(r.progress.load(), 2u + 4u) << "set_step, mark, and in and out of two collectives";
  }
}

TEST(RankActivity, NestedScopesCountOnceAndUnboundThreadsRecordNothing) {
  {
    const activity::InCollective unbound;  // no record: nothing happens
  }
  EXPECT_EQ(activity::collective_seconds(), 0.0);
  activity::RankActivity r;
  const activity::Bind bind(&r);
  const auto t0 = std::chrono::steady_clock::now();
  {
    const activity::InCollective outer;
    const activity::InCollective inner;
    EXPECT_EQ(r.collective_depth.load(), 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(activity::collective_seconds(), 0.03);
  EXPECT_LE(activity::collective_seconds(), elapsed) << "counted once, not per scope";
  EXPECT_EQ(r.collective_depth.load(), 0);
}

}  // namespace
}  // namespace meshtrain::comm
