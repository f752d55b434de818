// Uneven micro-batch counts per data-parallel replica (parallel.replica_grad_accum,
// docs/math.md (M.75)): replica d runs its own count of the window's
// micro-batches, the ones after replicas 0 .. d-1. The update is the one
// of one rank running the whole window: within rounding by default, and
// bit for bit in reproducible mode, where each replica sums its span's
// aligned subtrees and the ranks finish the tree across the spans.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/train/equivalence.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

train::TrainConfig uneven_config(bool gpt2) { return tp_test_config(4, 4, 2, gpt2, gpt2); }

train::EquivalenceReport bitwise(const train::TrainConfig& cfg, const char* layout) {
  return train::compare_with_single_rank(cfg, train::parse_layout(layout), 3, mixed_length_documents(60), 0.0,
                                         /*bitwise=*/true);
}

}  // namespace

TEST(UnevenReplicas, ReproducibleModeIsBitwiseOneRank) {
  for (bool gpt2 : {false, true}) {
    for (const char* text : {"ga=3+3+2", "ga=5+1+1+1", "ga=1+2+3+2", "ga=1+3", "ga=3+3+2,zero=1", "ga=3+3+2,zero=2",
                             "ga=3+3+2,zero=3,keep=1"}) {
      SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2 " : "llama ") << text);
      const auto r = bitwise(uneven_config(gpt2), text);
      EXPECT_TRUE(r.pass()) << r.str();
      EXPECT_TRUE(claims_cover(r, "uneven micro-batch counts per replica (")) << r.str();
    }
  }
}

TEST(UnevenReplicas, ComposedWithModelAxes) {
  for (bool gpt2 : {false, true}) {
    for (const char* text : {"ga=3+1,tp=2", "ga=3+1,tp=2,sp=on", "ga=3+1,cp=2", "ga=3+1,pp=2", "ga=2+1+1,pp=2,zero=1"}) {
      SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2 " : "llama ") << text);
      const auto r = bitwise(uneven_config(gpt2), text);
      EXPECT_TRUE(r.pass()) << r.str();
    }
  }
}

TEST(UnevenReplicas, DefaultModeMatchesOneRankWithinRounding) {
  const auto ds = mixed_length_documents(60);
  for (const char* text : {"ga=3+2+1", "ga=2+1,zero=2", "ga=4+1,reduce=avg"}) {
    SCOPED_TRACE(text);
    expect_matches_one_rank(uneven_config(false), train::parse_layout(text), 2, ds, 2e-5);
  }
}

TEST(UnevenReplicas, RefusesWhatCannotRun) {
  const auto cfg = uneven_config(false);
  expect_config_error([&] { bitwise(cfg, "ga=2+1"); },
                      "the sum of parallel.replica_grad_accum = 2 + 1 = 3 must be a power of two");
  expect_config_error([&] { bitwise(cfg, "dp=2,ga=1+1+2"); },
                      "parallel.replica_grad_accum holds 3 counts for parallel.dp = 2");
  expect_config_error([&] { bitwise(cfg, "ga=3+0+1"); }, "every replica runs at least one micro-batch");
  expect_config_error([&] { bitwise(cfg, "ga=3+1,zero=3"); }, "set parallel.keep_gathered = true");
  auto moe = tiny_moe_config(1, false, 0);
  expect_config_error([&] { train::with_layout(moe, train::parse_layout("ga=3+1,ep=2")); },
                      "the expert all-to-all runs once per micro-batch");
}

TEST(UnevenReplicas, GradAccumIsTheLargestCount) {
  auto cfg = train::parse_config("[data]\npath = \"d\"\n[training]\nmicro_batch = 2\n[parallel]\ndp = 3\nreplica_grad_accum = [3, 3, 2]\n",
                                 {}, "uneven.toml");
  EXPECT_EQ(cfg.training.grad_accum, 3);
  expect_config_error(
      [] {
        train::parse_config("[data]\npath = \"d\"\n[training]\ngrad_accum = 2\n[parallel]\ndp = 3\nreplica_grad_accum = [3, 3, 2]\n", {},
                            "uneven.toml");
      },
      "training.grad_accum = 2 but the largest of parallel.replica_grad_accum is 3");
  // Equal counts are the even form.
  cfg = train::parse_config("[data]\npath = \"d\"\n[parallel]\ndp = 2\nreplica_grad_accum = [4, 4]\n", {}, "even.toml");
  EXPECT_EQ(cfg.training.grad_accum, 4);
  EXPECT_TRUE(cfg.parallel.replica_grad_accum.empty());
}
