// Covers src/meshtrain/parallel/tie_group.cc (tied copies summed over their two stages).
// Pipeline parallelism through the trainer (docs/math.md,
// "Pipeline parallelism", Algorithm 1) on the threads backend:
//   - every schedule at pp in {2, 4} and m in {1, 3, 8} (fewer micro-batches
//     than stages included) computes what one rank computes on the same
//     window: bitwise for an untied model (losses, reduced gradients and
//     parameters after each step; the global norm is summed in the same
//     canonical order); a tied one within 1e-10 per tensor under fp64 and
//     1e-5 under f32, updates 0.1 (its gradient is the first stage's sum
//     plus the head stage's sum, one rank interleaves them per micro-batch);
//   - changing only the schedule (same p, m) is bitwise, tied included,
//     except ZB-V with a tied model (its V puts the head on the first rank);
//   - data x pipeline parallelism under every ZeRO stage (and ZeRO-3 keeping
//     gathered units across the window) within 1e-10 of one rank per tensor
//     under fp64, 1e-5 under f32;
//   - a stage failing mid-schedule stops every stage with its error;
//   - the measured bubble and the timeline of every step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>

#include "meshtrain/core/fault_injection.h"
#include "meshtrain/parallel/schedule_gen.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/run.h"
#include "support/numeric.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

namespace {

train::TrainConfig pipeline_config(int m, bool tied) {
  auto c = tiny_train_config();
  c.model.n_layers = 8;  // room for pp = 4 x v = 2 chunks
  c.model.tied_embeddings = tied;
  c.training.micro_batch = 2;
  c.training.grad_accum = m;
  c.optimizer.grad_clip = 0.5;  // clipping active: the global norm matters
  // The same team size on every layout: below AVX-512 oneDNN's GEMM sums in
  // another order for another thread count (the bitwise claims hold for
  // fixed kernels, train/kernel_environment.h).
  c.training.threads = 1;
  c.validate();
  return c;
}

train::TrainConfig with(train::TrainConfig c, const std::string& layout) {
  return train::with_layout(c, train::parse_layout(layout));
}

train::TrainConfig in_fp64(train::TrainConfig c) {
  c.training.precision = "fp64";
  return c;
}

using Trace = std::vector<train::StepRecord>;

// Runs `steps` updates on the layout of `cfg` (threads), rank 0's records
// of the whole model after each.
Trace run(const train::TrainConfig& cfg, const data::TokenDataset& ds, int steps = 2, int max_tag = 0) {
  Trace trace;
  std::mutex mu;
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    Trace local = train::record_steps(t, steps);
    for (const auto& r : local) EXPECT_FALSE(r.metrics.skipped) << r.metrics.skip_reason;
    std::lock_guard<std::mutex> lock(mu);
    if (t.context().rank == 0) trace = std::move(local);
  }, max_tag);
  return trace;
}

void expect_bitwise(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t s = 0; s < b.size(); ++s) {
    EXPECT_EQ(a[s].metrics.loss, b[s].metrics.loss) << "step " << s;
    EXPECT_EQ(a[s].metrics.grad_norm, b[s].metrics.grad_norm) << "step " << s;
    EXPECT_EQ(a[s].grads, b[s].grads) << "step " << s;
    EXPECT_EQ(a[s].params, b[s].params) << "step " << s;
  }
}

// The verify harness's comparison (per tensor, updates included) and the norms.
void expect_close(const Trace& a, const Trace& ref, const train::TrainConfig& cfg, double tol) {
  const auto r = train::compare_records(ref, a, train::global_tensors(cfg.model), cfg.training.precision, tol);
  EXPECT_TRUE(r.pass()) << r.str();
  for (size_t s = 0; s < ref.size(); ++s)
    EXPECT_NEAR(a[s].metrics.grad_norm, ref[s].metrics.grad_norm, tol * std::abs(ref[s].metrics.grad_norm))
        << "step " << s;
}

std::string layout_of(const std::string& schedule, int pp) {
  const int v = schedule == "interleaved" || schedule == "zb-v" ? 2 : 1;
  return "pp=" + std::to_string(pp) + ",schedule=" + schedule + ",v=" + std::to_string(v);
}

}  // namespace

TEST(Pipeline, EveryScheduleMatchesOneRank) {
  const auto ds = varied_documents(96, 7);
  for (bool tied : {false, true})
    for (int m : {1, 3, 8}) {
      const auto cfg = pipeline_config(m, tied);
      const Trace ref = run(cfg, ds);
      for (int pp : {2, 4})
        for (const std::string& schedule : parallel::schedule_names()) {
          SCOPED_TRACE(::testing::Message() << layout_of(schedule, pp) << " m=" << m << " tied=" << tied);
          const Trace got = run(with(cfg, layout_of(schedule, pp)), ds);
          if (!tied) {
            expect_bitwise(got, ref);
          } else {
            expect_close(got, ref, cfg, 1e-5);
            const auto f64 = in_fp64(cfg);
            expect_close(run(with(f64, layout_of(schedule, pp)), ds), run(f64, ds), f64, 1e-10);
          }
        }
    }
}

// The head in row chunks (training.head_chunk_rows) computes its loss in B:
// every schedule, zero-bubble ones (whose W of the head runs inside B)
// included, still gives one rank's losses and bits; and one rank's chunks
// of 12 rows (3 per micro-batch of 32) track the whole head's step: the
// head's weight gradient differs by about 1e-7 relative, which AdamW's
// first steps (lr 1e-2, m / sqrt(v)) carry into parameters at up to 2e-5
// under f32 (AVX2), 1e-13 under fp64.
TEST(Pipeline, TheHeadInRowChunksUnderEverySchedule) {
  const auto ds = varied_documents(96, 7);
  auto chunked = [](train::TrainConfig c) {
    c.training.head_chunk_rows = 12;
    return c;
  };
  const auto whole = pipeline_config(3, false), cfg = chunked(whole);
  const Trace ref = run(cfg, ds);
  expect_close(ref, run(whole, ds), whole, 1e-4);
  expect_close(run(chunked(in_fp64(whole)), ds), run(in_fp64(whole), ds), in_fp64(whole), 1e-10);
  for (const std::string& schedule : parallel::schedule_names()) {
    SCOPED_TRACE(layout_of(schedule, 2));
    expect_bitwise(run(with(cfg, layout_of(schedule, 2)), ds), ref);
  }
}

TEST(Pipeline, ChangingOnlyTheScheduleIsBitwise) {
  const auto ds = varied_documents(96, 8);
  for (bool tied : {false, true})
    for (int pp : {2, 4}) {
      const auto cfg = pipeline_config(3, tied);
      const Trace base = run(with(cfg, layout_of("1f1b", pp)), ds);
      for (const std::string& schedule : parallel::schedule_names()) {
        if (tied && schedule == "zb-v") continue;  // the V holds both tied uses on rank 0 (see the file comment)
        SCOPED_TRACE(::testing::Message() << layout_of(schedule, pp) << " tied=" << tied);
        expect_bitwise(run(with(cfg, layout_of(schedule, pp)), ds), base);
      }
    }
}

TEST(Pipeline, TiedCopiesStayIdenticalAndCountOnce) {
  const auto ds = varied_documents(64, 9);
  auto cfg = with(pipeline_config(2, true), "pp=4,schedule=1f1b");
  std::mutex mu;
  std::vector<std::vector<double>> embed(4);
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    for (int s = 0; s < 2; ++s) t.step();
    const auto v = t.engine().gather_unit(0, false);
    const int stage = t.layout().coord(comm::Axis::Pp);
    std::lock_guard<std::mutex> lock(mu);
    embed[size_t(stage)] = v;
    EXPECT_EQ(t.layout().tied_units().empty(), stage == 1 || stage == 2);
  });
  ASSERT_FALSE(embed[0].empty());
  EXPECT_EQ(embed[3], embed[0]) << "the head's copy follows the embedding bit for bit";
  EXPECT_TRUE(embed[1].empty() && embed[2].empty());
}

TEST(Pipeline, DataTimesPipelineUnderEveryZeroStage) {
  const auto ds = varied_documents(96, 10);
  for (bool tied : {false, true}) {
    const auto cfg = pipeline_config(2, tied);
    auto ref_cfg = cfg;
    ref_cfg.training.grad_accum = 4;  // the same global window on one rank
    const Trace ref = run(ref_cfg, ds), ref_f64 = run(in_fp64(ref_cfg), ds);
    for (std::string zero : {"zero=0", "zero=1", "zero=2", "zero=3", "zero=3,keep=1", "zero=3,reshard=0"})
      for (std::string schedule : {"1f1b", "zb-h1", "zb-v"}) {  // zb-*: reductions after split weight gradients
        SCOPED_TRACE("dp=2," + layout_of(schedule, 2) + "," + zero + (tied ? " tied" : ""));
        const Trace got = run(with(cfg, "dp=2," + layout_of(schedule, 2) + "," + zero), ds);
        // fp32 per tensor: the dp split sums each gradient in another order, and
        // AdamW's step turns that into up to 3e-5 of a tensor's parameters (AVX2
        // GEMMs); the fp64 run below is the tight check.
        expect_close(got, ref, cfg, 1e-4);
        expect_close(run(with(in_fp64(cfg), "dp=2," + layout_of(schedule, 2) + "," + zero), ds), ref_f64,
                     in_fp64(cfg), 1e-10);
      }
  }
}

TEST(Pipeline, AFailingStageStopsEveryStageWithItsError) {
  const auto ds = varied_documents(64, 11);
  auto cfg = with(pipeline_config(4, false), "pp=4,schedule=1f1b");
  const auto start = std::chrono::steady_clock::now();
  try {
    with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
      t.step();
      data::Batch window;
      const int64_t rows = cfg.training.grad_accum * cfg.training.micro_batch;
      t.loader().next_window(rows, 0, rows, &window);
      window.targets[size_t(2 * window.seq + 1)] = 9999;  // micro-batch 1: the last stage's loss rejects it
      t.step_on(window);
    });
    FAIL() << "the failure must reach the caller";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("target 9999"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "no stage waits for the timeout";
}

TEST(Pipeline, StepsMeasureTheirBubbleAndRecordEveryAction) {
  const auto ds = varied_documents(64, 12);
  for (std::string schedule : {"gpipe", "zb-h1", "interleaved"}) {
    auto cfg = with(pipeline_config(4, false), layout_of(schedule, 2));
    with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
      const train::StepMetrics m = t.step();
      EXPECT_GE(m.pipeline_bubble, 0.0);
      EXPECT_LT(m.pipeline_bubble, 1.0);
      EXPECT_DOUBLE_EQ(m.pipeline_bubble_formula,
                       parallel::bubble_formula(schedule, 2, 4, cfg.parallel.virtual_stages));
      const parallel::PipelineTimeline& tl = t.pipeline_timeline();
      ASSERT_EQ(tl.stages.size(), 2u);
      const int chunks_per_stage = cfg.parallel.virtual_stages, kinds = schedule == "zb-h1" ? 3 : 2;
      for (const auto& stage : tl.stages) {
        EXPECT_EQ(int(stage.size()), 4 * chunks_per_stage * kinds) << schedule;
        for (const auto& a : stage) EXPECT_LE(a.start, a.end);
      }
      EXPECT_NE(m.console_line(1).find("bubble"), std::string::npos);
      // Every stage receives (activations or gradients); the exposed part of
      // its waits is at most the waits, which lie inside the step.
      EXPECT_GT(m.pipeline_receive_wait_s, 0.0) << schedule;
      EXPECT_GE(m.pipeline_transfer_exposed_s, 0.0) << schedule;
      EXPECT_LE(m.pipeline_transfer_exposed_s, m.pipeline_receive_wait_s) << schedule;
      EXPECT_LT(m.pipeline_receive_wait_s, m.seconds) << schedule;
      EXPECT_TRUE(m.to_json().contains("pipeline_transfer_exposed_s"));
    });
  }
}

// A first stage whose segments' forwards each take 50 ms longer (5
// segments, 2 micro-batches): the second stage waits at its receives for
// the slow forwards (the dependency, about 0.5 s), while the part after the
// sender finished (the transfer of [32, 16] floats) stays a small share.
TEST(Pipeline, ReceiveWaitsSplitTheDependencyFromTheTransfer) {
  const auto ds = varied_documents(64, 12);
  const auto cfg = with(pipeline_config(2, false), "pp=2,schedule=1f1b");
  std::mutex mu;
  std::vector<train::StepMetrics> by_stage(2);
  fault::arm(fault::parse_rule("forward@0:delay=0.05"));
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    const train::StepMetrics m = t.step();
    std::lock_guard<std::mutex> lock(mu);
    by_stage[size_t(t.context().rank)] = m;
  });
  fault::disarm();
  const train::StepMetrics& second = by_stage[1];
  EXPECT_GT(second.pipeline_receive_wait_s, 0.2) << "it waits for the slow stage's activations";
  EXPECT_LT(second.pipeline_transfer_exposed_s, 0.1 * second.pipeline_receive_wait_s) << "not for their transfer";
}

TEST(Pipeline, BadPipelineConfigsAreRejectedWhenRead) {
  const std::string base = "[model]\nd_model = 32\nn_layers = 8\nn_heads = 4\nn_kv_heads = 2\n[data]\npath = \"d\"\n";
  auto rejects = [&](const std::vector<std::string>& overrides, const std::string& why) {
    EXPECT_THAT([&] { train::parse_config(base, overrides); }, ThrowsMessage<ConfigError>(HasSubstr(why)));
  };
  const auto ok = train::parse_config(
      base, {"parallel.pp=3", "parallel.pp_layers=[3, 3, 2]", "parallel.schedule=\"zb-h1\"", "training.grad_accum=2"});
  EXPECT_EQ(ok.parallel.pp_layers, (std::vector<int64_t>{3, 3, 2}));
  rejects({"parallel.pp=9"}, "9 pipeline chunks but model.n_layers = 8");
  rejects({"parallel.pp=2", "parallel.schedule=\"interleaved\"", "parallel.virtual_stages=3"},
          "parallel.virtual_stages = 3 does not divide the 8 / 2 blocks");
  rejects({"parallel.pp=2", "parallel.schedule=\"zb-v\""}, "set parallel.virtual_stages = 2");
  rejects({"parallel.pp=2", "parallel.schedule=\"1f1b\"", "parallel.virtual_stages=2"}, "needs schedule = interleaved");
  rejects({"parallel.pp=2", "parallel.pp_layers=[3, 3]"}, "adds up to 6 blocks");
  rejects({"parallel.pp=2", "parallel.pp_layers=[8, 0]"}, "at least one block");
  rejects({"parallel.pp=2", "parallel.schedule=\"chimera\""}, "expected one of gpipe");
  rejects({"parallel.pp=0"}, "parallel.pp = 0");
  rejects({"parallel.pp=2", "training.grad_accum=0"}, "training.grad_accum = 0");
  // The mesh composes pp with dp: dp = 0 takes what the world leaves.
  auto cfg = train::parse_config(base, {"parallel.pp=2", "parallel.dp=0"});
  const comm::MeshShape mesh = train::mesh_for(cfg, 4);
  EXPECT_EQ(mesh.pp, 2);
  EXPECT_EQ(mesh.dp, 2);
  EXPECT_THAT([&] { train::mesh_for(cfg, 3); },
              ThrowsMessage<ConfigError>(HasSubstr("world size 3 is not a multiple")));
}

TEST(Pipeline, EvaluationRunsThroughEveryChunkPlacement) {
  const auto ds = varied_documents(64, 15);
  const auto val = std::optional<data::TokenDataset>(varied_documents(24, 16));
  auto evaluate = [&](const train::TrainConfig& cfg) {
    double loss = 0;
    std::mutex mu;
    with_trainers(cfg, ds, val, [&](train::Trainer& t) {
      t.step();
      const train::EvalResult e = t.evaluate();
      std::lock_guard<std::mutex> lock(mu);
      if (t.context().rank == 0) loss = e.loss;
    });
    return loss;
  };
  auto cfg = pipeline_config(2, false);
  cfg.training.eval_rows = 8;
  const double ref = evaluate(cfg);
  EXPECT_GT(ref, 0.0);
  for (std::string layout : {"pp=2,schedule=zb-v", "pp=4,schedule=interleaved,v=2", "pp=2,schedule=gpipe"})
    EXPECT_EQ(evaluate(with(cfg, layout)), ref) << layout;
}

TEST(Pipeline, SixteenBitPoliciesSplitIntoStagesBitwise) {
  // bf16 and fp16 (with its dynamic loss scale): activations and their
  // gradients cross stages in the compute dtype, the scaler's skip
  // decision spans every stage.
  const auto ds = varied_documents(96, 17);
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    auto cfg = pipeline_config(3, false);
    cfg.training.precision = precision;
    cfg.validate();
    const Trace ref = run(cfg, ds);
    expect_bitwise(run(with(cfg, "pp=2,schedule=zb-h1"), ds), ref);
    expect_bitwise(run(with(cfg, "pp=4,schedule=interleaved,v=2"), ds), ref);
  }
}

TEST(Pipeline, ReproducibleModeComposesWithFusedBackwardSchedules) {
  // The per-micro-batch gradient trees of reproducible mode: dp x pp splits
  // of the window give the bits one rank gets; a split backward is refused.
  const auto ds = varied_documents(96, 18);
  auto cfg = pipeline_config(4, false);
  cfg.training.reproducible = true;
  cfg.validate();
  const Trace ref = run(cfg, ds);
  for (const char* layout : {"pp=2,schedule=1f1b", "dp=2,pp=2,schedule=gpipe,zero=2", "pp=4,schedule=interleaved,v=2"}) {
    SCOPED_TRACE(layout);
    auto par = with(cfg, layout);
    par.training.grad_accum = 4 / par.parallel.dp;  // the same window
    expect_bitwise(run(par, ds), ref);
  }
  EXPECT_THAT([&] { with(cfg, "pp=2,schedule=zb-h1"); },
              ThrowsMessage<ConfigError>(HasSubstr("parallel.schedule = zb-h1 runs the next micro-batch's input")));
}

// Transfers are tagged within the group's tag bound whatever the window
// (parallel/executor.cc tag): MPI promises only 32767, which tags counted
// as (micro * 1024 + chunk) * 2 passed at micro-batch 16, and the
// reproducible tree's tags sat at 2^28. A bound of 63 makes the pipeline's
// tags come round inside one window; the bits are those of an unbounded run.
TEST(Pipeline, TagsStayWithinTheGroupsBound) {
  const auto ds = varied_documents(256, 7);
  auto cfg = with(pipeline_config(32, false), "pp=2,schedule=1f1b,dp=2");
  cfg.training.reproducible = true;  // the tree's point-to-point exchanges over dp
  const Trace ref = run(cfg, ds, 1);
  for (int bound : {32767, 63}) {
    SCOPED_TRACE(::testing::Message() << "max_tag " << bound);
    expect_bitwise(run(cfg, ds, 1, bound), ref);
  }
}
