// Elastic membership (train/elastic.h, docs/comm.md "Elastic membership"):
// the largest runnable layout of a global window on the ranks left, the
// capacity file, the config keys, and the threads-backend ranks a launch
// lost. Whole jobs that shrink and grow, bit for bit: elastic_test.sh.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/comm/launch.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/elastic.h"
#include "support/test_dir.h"
#include "train/config_error.h"
#include "train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::train;

namespace {

TrainConfig window_of(int64_t dp, int64_t grad_accum) {
  TrainConfig c = meshtrain::testing::tiny_train_config();
  c.parallel.dp = dp;
  c.training.grad_accum = grad_accum;
  c.metrics.run_dir = "runs/elastic-unit";
  return c;
}

TEST(ElasticLayout, KeepsTheGlobalWindowAndTakesTheLargestDpThatDividesIt) {
  const TrainConfig c = window_of(4, 1);  // 4 micro-batches per window
  const auto three = largest_layout(c, 3);
  ASSERT_TRUE(three);
  EXPECT_EQ(three->ranks, 2);
  EXPECT_EQ(three->dp, 2);
  EXPECT_EQ(three->grad_accum, 2);
  EXPECT_EQ(largest_layout(c, 8)->dp, 4);  // never more micro-batches than the window has
  EXPECT_EQ(largest_layout(c, 1)->grad_accum, 4);
  EXPECT_EQ(largest_layout(window_of(6, 1), 5)->dp, 3);  // 6 = 3 x 2 outside reproducible mode
}

TEST(ElasticLayout, KeepsTheModelAxesAndTheirRanks) {
  TrainConfig c = window_of(2, 2);
  c.parallel.tp = 2;
  const auto l = largest_layout(c, 7);  // 3 tp pairs fit; dp must divide the window of 4
  ASSERT_TRUE(l);
  EXPECT_EQ(l->dp, 2);
  EXPECT_EQ(l->ranks, 4);
  EXPECT_FALSE(largest_layout(c, 1));  // not even one tp group
}

TEST(ElasticLayout, UnevenCountsWhereTheyShortenTheStep) {
  TrainConfig c = window_of(4, 2);  // 8 leaves
  c.training.reproducible = true;
  const auto l = largest_layout(c, 3);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->dp, 3);
  EXPECT_EQ(l->grad_accum, 3);
  EXPECT_EQ(l->replica_grad_accum, (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(l->describe(), "3 ranks: dp=3, grad_accum=3+3+2");
  // As fast on fewer ranks: 8 over 7 replicas runs 2 each on 4.
  EXPECT_EQ(largest_layout(c, 7)->dp, 4);
  EXPECT_TRUE(largest_layout(c, 7)->replica_grad_accum.empty());
  c.training.reproducible = false;
  c.parallel.dp = 6, c.training.grad_accum = 1;
  EXPECT_EQ(largest_layout(c, 5)->dp, 3);
}

TEST(ElasticLayout, MinRanksIsTheFloor) {
  TrainConfig c = window_of(4, 1);
  c.comm.min_ranks = 3;
  // 2 + 2 on 2 ranks is below the floor: 4 over 3 replicas runs 2 + 1 + 1.
  EXPECT_EQ(largest_layout(c, 3)->replica_grad_accum, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(largest_layout(c, 4)->ranks, 4);
  EXPECT_FALSE(largest_layout(c, 2));
  EXPECT_THAT([&] { shrink_or_grow(c, 2, "2 rank(s) lost"); },
              ::testing::ThrowsMessage<CommError>(::testing::AllOf(
                  ::testing::HasSubstr("2 rank(s) lost: 2 ranks are left"), ::testing::HasSubstr("comm.min_ranks = 3"))));
}

TEST(ElasticLayout, WithLayoutValidatesAndDescribes) {
  const TrainConfig c = at_layout(window_of(4, 1), {2, 2, 2});
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.training.grad_accum, 2);
  EXPECT_EQ(current_layout(c).describe(), "2 ranks: dp=2, grad_accum=2");
  EXPECT_EQ(ElasticLayout({1, 1, 4}).describe(), "1 rank: dp=1, grad_accum=4");
}

TEST(ElasticCapacity, TheRunDirectoryFileWinsAndBadContentIsNamed) {
  const auto dir = meshtrain::testing::fresh_test_dir("elastic");
  TrainConfig c = window_of(4, 1);
  c.metrics.run_dir = dir.string();
  EXPECT_EQ(read_capacity(c, 4), 4);  // no file
  std::ofstream(dir / "capacity") << "2\n";
  EXPECT_EQ(read_capacity(c, 4), 2);
  std::ofstream(dir / "capacity") << "two";
  EXPECT_THAT([&] { read_capacity(c, 4); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("holds 'two': expected one positive count")));
  std::ofstream(dir / "capacity") << "0";
  EXPECT_THROW(read_capacity(c, 4), ConfigError);
}

TEST(ElasticConfig, KeysAreReadAndChecked) {
  const std::string base = "[model]\nd_model = 16\nn_layers = 1\nn_heads = 4\n[data]\npath = \"d\"\n";
  EXPECT_EQ(meshtrain::testing::config_error(base, {"comm.elastic=true", "comm.min_ranks=2", "parallel.dp=2"}), "");
  EXPECT_NE(meshtrain::testing::config_error(base, {"comm.min_ranks=0"}).find("comm.min_ranks = 0: expected >= 1"),
            std::string::npos);
  EXPECT_NE(meshtrain::testing::config_error(base, {"comm.elastic=true", "parallel.dp=0", "comm.backend=\"mpi\""})
                .find("comm.elastic keeps the global window"),
            std::string::npos);
}

TEST(ElasticLaunch, TheThreadsBackendNamesTheRanksWhoseOwnFailureEndedTheLaunch) {
  comm::LaunchOptions o;
  o.world_size = 4;
  std::vector<int> failed;
  o.failed_ranks = &failed;
  EXPECT_THROW(comm::launch_threads(o, [](comm::ParallelContext& ctx) {
                 if (ctx.rank == 2) throw CommError("rank 2 is gone");
                 ctx.world->barrier();  // the others are aborted here
               }),
               CommError);
  EXPECT_EQ(failed, std::vector<int>{2});
}

}  // namespace
