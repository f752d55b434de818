// Covers src/meshtrain/comm/recording/recording_group.cc and
// recording_context.cc: one rank of a mesh of any size whose groups record
// every op into the ledger (group, kind, bytes) and move no data, and whose
// allocator is the meta device's.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "meshtrain/comm/recording/recording_context.h"
#include "meshtrain/comm/recording/recording_group.h"

namespace meshtrain::comm {
namespace {

TEST(RecordingContext, OneRankOfAnyMeshWithMetaMemory) {
  // Rank 5 of pp 2 x dp 2 x tp 2: coordinates pp 1, dp 0, tp 1.
  const ParallelContext ctx = recording_context(MeshShape{2, 2, 1, 2}, 5, 1);
  EXPECT_EQ(ctx.rank, 5);
  EXPECT_EQ(ctx.world_size, 8);
  EXPECT_EQ(ctx.world->size(), 8);
  EXPECT_EQ(ctx.group("tp").size(), 2);
  EXPECT_EQ(ctx.group("dp").size(), 2);
  EXPECT_EQ(ctx.group({"pp", "tp"}).size(), 4);
  EXPECT_EQ(ctx.group("tp").rank(), 1);
  EXPECT_EQ(ctx.group("pp").rank(), 1);
  EXPECT_EQ(ctx.group("dp").rank(), 0);
  EXPECT_EQ(ctx.allocator->device(), Device::Meta);
  ASSERT_NE(ctx.ledger, nullptr);
  EXPECT_TRUE(ctx.ledger->ops().empty()) << "building the mesh records nothing";
}

TEST(RecordingGroup, OpsAreRecordedAndHostValuesAreAGroupOfEquals) {
  const ParallelContext ctx = recording_context(MeshShape{1, 4, 1, 1}, 2, 1);
  ProcessGroup& dp = ctx.group("dp");
  ctx.ledger->set_position(7, StepPhase::GradSync);
  int64_t counts[3] = {5, 6, 7};
  dp.all_reduce(counts, 3, DType::I64);
  // Every member holds what this one holds: a sum returns this rank's input
  // (the step reduces counts it then divides by, never sums of copies).
  EXPECT_EQ(counts[0], 5);
  EXPECT_EQ(counts[2], 7);
  std::vector<float> mine = {1.5f, 2.5f}, all(8, 0.0f);
  dp.all_gather(mine.data(), all.data(), 8, DType::F32);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(all[size_t(2 * r + 1)], 2.5f) << "the gather repeats this rank's chunk";
  const auto& ops = ctx.ledger->ops();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].group, "dp");
  EXPECT_EQ(ops[0].group_size, 4);
  EXPECT_EQ(ops[0].kind, OpKind::AllReduce);
  EXPECT_EQ(ops[0].bytes, 24);
  EXPECT_EQ(ops[0].phase, StepPhase::GradSync);
  EXPECT_EQ(ops[0].action, 7);
  EXPECT_EQ(ops[1].kind, OpKind::AllGather);
  const auto totals = ctx.ledger->by_group();
  EXPECT_EQ(totals.at({"dp", OpKind::AllReduce}).calls, 1);
}

// A non-blocking op completes after `completion_lag` completion tests, or
// when waited for: the planner's bracket of networks never behind and
// always behind.
TEST(RecordingGroup, NonBlockingOpsCompleteAfterTheLag) {
  for (int lag : {1, 3}) {
    const ParallelContext ctx = recording_context(MeshShape{1, 2, 1, 1}, 0, lag);
    float x = 1.0f;
    Work w = ctx.group("dp").iall_reduce(&x, &x, 1, DType::F32);
    int tests = 1;
    while (!w.is_completed()) ++tests;
    EXPECT_EQ(tests, lag);
  }
  const ParallelContext never = recording_context(MeshShape{1, 2, 1, 1}, 0, kNeverCompletes);
  float x = 1.0f;
  Work w = never.group("dp").iall_reduce(&x, &x, 1, DType::F32);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(w.is_completed());
  w.wait();
  EXPECT_TRUE(w.is_completed());
}

TEST(RecordingGroup, ASplitWithoutItsPlaceIsRefused) {
  const ParallelContext ctx = recording_context(MeshShape{1, 2, 1, 1}, 0, 1);
  EXPECT_ANY_THROW(ctx.world->split(0, 0, "sub", GroupOptions{}));
}

}  // namespace
}  // namespace meshtrain::comm
