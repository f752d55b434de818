// Covers src/meshtrain/train/context_shard.cc (rows cut into balanced chunks, their positions and labels).
// Context parallelism against one rank through the trainer (docs/math.md, "Context
// parallelism", "Rule: evidence for a layout or an optimization"): the same global batch,
// 3 AdamW steps, the loss, every gradient, update and parameter compared per tensor after
// each step (equivalence.h), under fp64 with tolerance 1e-10 and f32 with 1e-5 (updates
// 0.1): the ring folds the key chunks into each query's softmax state in ring order (a
// different rounding of the same sums), and the gradients are summed over dp x cp.
//   cp in {2, 4} x packed and padded batches x documents shorter than a
//   chunk, spanning chunk boundaries, longer than a rank's share and than a
//   row x {MHA, GQA}; composed cp=2 x dp=2 under every ZeRO stage,
//   cp=2 x tp=2 (with and without SP), cp=2 x pp=2 (1f1b; and x dp=2,
//   gpipe); recomputation; bf16; reproducible mode.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "meshtrain/train/equivalence.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

constexpr double kTolerance = 1e-5;

void expect_equivalent(const train::TrainConfig& cfg, const std::string& layout, const data::TokenDataset& ds,
                       WorstDifference& worst, double tolerance = kTolerance) {
  expect_matches_one_rank(cfg, train::parse_layout(layout), 3, ds, tolerance, &worst);
}

}  // namespace

TEST(ContextParallelEquivalence, CpTwoAndFourPackedAndPaddedMatchOneRank) {
  const auto ds = mixed_length_documents(60);
  WorstDifference worst;
  for (const char* mode : {"packed", "padded"})
    for (int kv : {4, 2}) {  // MHA, GQA
      auto cfg = context_parallel_config();
      cfg.data.mode = mode;
      cfg.model.n_kv_heads = kv;
      for (const char* layout : {"cp=2", "cp=4"}) {
        SCOPED_TRACE(::testing::Message() << mode << " kv=" << kv << " " << layout);
        expect_equivalent(cfg, layout, ds, worst);
      }
    }
  worst.print();
}

TEST(ContextParallelEquivalence, ComposedWithDataParallelismZeroAndTensorParallelism) {
  const auto ds = mixed_length_documents(60);
  WorstDifference worst;
  // The last, dp2 x cp4 on 8 ranks, must equal dp8 (a loss scaled by a
  // rank's local count breaks that elsewhere): both equal one rank.
  for (const char* layout : {"cp=2,dp=2,zero=0", "cp=2,dp=2,zero=1", "cp=2,dp=2,zero=2", "cp=2,dp=2,zero=3",
                             "cp=2,dp=2,zero=1,reduce=avg", "cp=2,tp=2", "cp=2,tp=2,sp=on", "cp=2,pp=2",
                             "cp=2,dp=2,pp=2,schedule=gpipe", "cp=4,dp=2,zero=1"}) {
    SCOPED_TRACE(layout);
    expect_equivalent(context_parallel_config(), layout, ds, worst);
  }
  worst.print();
}

// Activation recomputation replays each block's forward, ring included, in
// backward (every cp rank in the same order).
TEST(ContextParallelEquivalence, RecomputationReplaysTheRing) {
  const auto ds = mixed_length_documents(60);
  WorstDifference worst;
  auto cfg = context_parallel_config();
  cfg.training.recompute = true;
  for (const char* layout : {"cp=2", "cp=4,zero=3"}) {
    SCOPED_TRACE(layout);
    expect_equivalent(cfg, layout, ds, worst);
  }
  worst.print();
}

// Under bf16 the ring's softmax states stay in f32 (the activations' type),
// and it computes on its f32 q, k, v and output rounded to the bf16 values
// one rank's kernel stores (docs/math.md (M.80)): the same function, so the
// runs differ by f32 summation order only (gradients 2e-5, parameters 2e-6
// apart; without the rounding the parameters were 3e-2 apart).
TEST(ContextParallelEquivalence, Bf16TracksOneRank) {
  const auto ds = mixed_length_documents(60);
  WorstDifference worst;
  auto cfg = context_parallel_config();
  cfg.training.precision = "bf16";
  for (const char* layout : {"cp=2", "cp=2,dp=2,zero=3"}) {
    SCOPED_TRACE(layout);
    expect_equivalent(cfg, layout, ds, worst, 1e-3);
  }
  worst.print();
}

// Reproducible mode: a cp run repeats bit for bit (the chunk pairs fold and
// sum in a fixed order whatever the arrival timing) and equals one rank's
// bit for bit (docs/math.md (M.74); the layouts of tests/train/cp_bitwise_test.cc).
TEST(ContextParallelEquivalence, ReproducibleModeRepeatsBitwiseAndEqualsOneRank) {
  const auto ds = mixed_length_documents(60);
  auto cfg = context_parallel_config();
  cfg.training.reproducible = true;
  WorstDifference worst;
  expect_equivalent(cfg, "cp=2,dp=2,zero=1", ds, worst);
  auto run = [&] {
    std::vector<double> out;
    std::mutex mu;
    with_trainers(train::with_layout(cfg, train::parse_layout("cp=2,dp=2,zero=1")), ds, std::nullopt,
                  [&](train::Trainer& t) {
                    std::vector<double> mine;
                    for (int s = 0; s < 3; ++s) mine.push_back(t.step().loss);
                    const auto params = train::gather_model(t, false);
                    mine.insert(mine.end(), params.begin(), params.end());
                    std::lock_guard<std::mutex> lock(mu);
                    if (t.context().rank == 0) out = mine;
                  });
    return out;
  };
  const auto first = run(), second = run();
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first, second);
  const auto r = train::compare_with_single_rank(cfg, train::parse_layout("cp=2,dp=2,zero=1"), 2, ds, 0, true);
  EXPECT_TRUE(r.pass()) << r.str();
}
