// Data parallelism and ZeRO against the single-rank run (docs/math.md (M.6), (M.26),
// "Rule: evidence for a layout or an optimization").
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "meshtrain/comm/thread_world.h"
#include "meshtrain/parallel/data_parallel.h"
#include "support/numeric.h"
#include "support/run_ranks.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

struct Outcome {
  std::vector<double> losses;
  std::vector<int64_t> counts;
  std::vector<double> params;  // gathered full parameters after the steps
  std::vector<double> grads;   // gathered reduced gradients of the last step
};


train::TrainConfig layout(int R, int G, int B, int stage, bool reshard) {
  auto cfg = tiny_train_config();
  cfg.optimizer.lr = 1e-3;
  cfg.parallel.dp = R;
  cfg.parallel.zero_stage = stage;
  cfg.parallel.reshard_after_forward = reshard;
  cfg.parallel.bucket_mb = 0.01;  // several buckets even for the tiny model
  cfg.training.grad_accum = G;
  cfg.training.micro_batch = B;
  return cfg;
}

Outcome run_layout(const train::TrainConfig& cfg, int steps = 3) {
  Outcome o;
  std::mutex mu;
  with_trainers(cfg, varied_documents(96, 3), std::nullopt, [&](train::Trainer& t) {
    std::vector<double> losses;
    std::vector<int64_t> counts;
    for (int s = 0; s < steps; ++s) {
      const auto m = t.step();
      losses.push_back(m.loss);
      counts.push_back(m.supervised);
    }
    auto g = gathered(t, true);
    auto p = gathered(t);
    if (t.context().rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      o = {losses, counts, p, g};
    }
  });
  return o;
}

}  // namespace

// R x G x stage x reshard against one rank holding the same global window
// (R * G * B rows). Padded batches: supervised counts differ per replica and
// per micro-batch. Tolerance (fp32, other reduction order, 3 AdamW steps at
// lr 1e-3): losses 1e-5 relative, parameters 1e-6 absolute (total update up
// to 3e-3). Stage changes alone (same R, G) are bitwise identical.
TEST(DataParallel, EquivalentToSingleRankForEveryLayout) {
  const int B = 1;
  for (int R : {1, 2, 4}) {
    for (int G : {1, 2, 4}) {
      const Outcome ref = run_layout(layout(1, 1, R * G * B, 0, true));
      Outcome stage0;
      for (int stage : {0, 1, 2, 3}) {
        for (bool reshard : {true, false}) {
          if (stage != 3 && !reshard) continue;
          SCOPED_TRACE(::testing::Message() << "R=" << R << " G=" << G << " stage=" << stage << " reshard=" << reshard);
          const Outcome o = run_layout(layout(R, G, B, stage, reshard));
          EXPECT_EQ(o.counts, ref.counts);
          for (size_t s = 0; s < ref.losses.size(); ++s) EXPECT_NEAR(o.losses[s], ref.losses[s], 1e-5 * ref.losses[s]);
          EXPECT_LT(max_abs_diff(o.params, ref.params), 1e-6);
          if (stage == 0) {
            stage0 = o;
          } else {
            EXPECT_EQ(o.params, stage0.params) << "ZeRO stage changes must be bitwise identical to stage 0";
            EXPECT_EQ(o.grads, stage0.grads);
            EXPECT_EQ(o.losses, stage0.losses);
          }
        }
      }
    }
  }
}

// A replica whose rows have no supervised target still joins every
// collective, and the update equals the single-rank one.
TEST(DataParallel, ReplicaWithZeroTargets) {
  auto ds = varied_documents(32, 5);
  data::BatchLoader loader(ds, data::LoaderConfig{data::BatchMode::Padded, 16, 1, 16});
  data::Batch window;
  loader.next_window(4, 0, 4, &window);
  for (int64_t i = 2 * window.seq; i < 4 * window.seq; ++i) window.targets[size_t(i)] = data::kIgnore;
  window.recount();

  auto run = [&](int R, int stage) {
    auto cfg = layout(R, 1, 4 / R, stage, true);
    std::vector<double> params;
    std::mutex mu;
    with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
      data::Batch mine;
      const int64_t rows = 4 / R;
      window.copy_rows(t.context().rank * rows, rows, &mine);
      for (int s = 0; s < 2; ++s) {
        const auto m = t.step_on(mine);
        EXPECT_FALSE(m.skipped);
        EXPECT_EQ(m.supervised, window.supervised_targets);
      }
      auto p = gathered(t);
      std::lock_guard<std::mutex> lock(mu);
      params = p;
    });
    return params;
  };
  const auto ref = run(1, 0);
  for (int stage : {0, 2, 3}) EXPECT_LT(max_abs_diff(run(2, stage), ref), 1e-6) << "stage " << stage;
}

// docs/math.md (M.5)-(M.6) worked example: replicas with 2 and 6 targets and loss-sum
// gradients 2 and 18. Global normalization gives 2.5 under both collective
// conventions; the mean of local means gives 2.
TEST(DataParallel, WorkedExampleGlobalNormalization) {
  for (auto conv : {parallel::GradReduce::Sum, parallel::GradReduce::Avg}) {
    auto world = comm::ThreadWorld::create(2);
    std::vector<double> result(2), local_mean(2);
    run_ranks(2, [&](int r) {
      comm::ProcessGroup& g = *world->group(r);
      const double n_r = r == 0 ? 2 : 6, grad_sum = r == 0 ? 2 : 18;
      double N = n_r;
      g.all_reduce(&N, 1, DType::F64, comm::ReduceOp::Sum);
      // The coefficient the engine uses for this convention (docs/math.md (M.6)).
      const double coeff = parallel::loss_coefficient(conv, g.size(), int64_t(N));
      double grad = coeff * grad_sum;
      g.all_reduce(&grad, 1, DType::F64,
                   conv == parallel::GradReduce::Avg ? comm::ReduceOp::Avg : comm::ReduceOp::Sum);
      result[size_t(r)] = grad;
      double lm = grad_sum / n_r;
      g.all_reduce(&lm, 1, DType::F64, comm::ReduceOp::Avg);
      local_mean[size_t(r)] = lm;
    });
    EXPECT_DOUBLE_EQ(result[0], 2.5);
    EXPECT_DOUBLE_EQ(result[1], 2.5);
    EXPECT_DOUBLE_EQ(local_mean[0], 2.0);
    EXPECT_NE(local_mean[0], result[0]) << "local-mean averaging must be detected as a different objective";
  }
}

// The trainer's coefficient follows the collective: with "avg" reduction
// the update equals the "sum" one (up to fp32 rounding).
TEST(DataParallel, SumAndAverageConventionsAgree) {
  auto sum_cfg = layout(2, 2, 1, 0, true);
  auto avg_cfg = sum_cfg;
  avg_cfg.parallel.grad_reduce = parallel::GradReduce::Avg;
  EXPECT_LT(max_abs_diff(run_layout(sum_cfg).params, run_layout(avg_cfg).params), 1e-6);
}

// Clipping happens once, on the global norm after reduction: with a clip
// threshold far below the gradient norm (every step clips), dp=2 still
// matches one rank, which clipping each replica's gradient before the sum
// would not (the replicas' gradients differ in norm and direction).
TEST(DataParallel, ClipsTheReducedGradient) {
  auto one = layout(1, 1, 4, 0, true), two = layout(2, 1, 2, 0, true);
  one.optimizer.grad_clip = two.optimizer.grad_clip = 0.05;
  std::vector<double> clip_coefs;
  std::mutex mu;
  with_trainers(two, varied_documents(96, 3), std::nullopt, [&](train::Trainer& t) {
    for (int s = 0; s < 3; ++s) {
      const auto m = t.step();
      std::lock_guard<std::mutex> lock(mu);
      if (t.context().rank == 0) clip_coefs.push_back(m.clip_coef);
    }
  });
  for (double c : clip_coefs) EXPECT_LT(c, 0.5) << "the fixture must clip every step";
  const Outcome a = run_layout(one), b = run_layout(two);
  EXPECT_LT(max_abs_diff(a.params, b.params), 1e-6);
}

// A non-finite gradient on one rank only: every rank skips that update and
// parameters, step, LR clock and data cursor stay consistent.
TEST(DataParallel, NonFiniteOnOneRankSkipsEverywhere) {
  for (int stage : {0, 2}) {
    auto cfg = layout(2, 1, 2, stage, true);
    std::vector<std::vector<double>> params(2);
    std::vector<int64_t> opt_steps(2), windows(2);
    with_trainers(cfg, varied_documents(64, 3), std::nullopt, [&](train::Trainer& t) {
      const int r = t.context().rank;
      t.step();
      const auto after_first = gathered(t);
      t.set_after_reduction([&](train::Trainer& tr) {
        if (r == 1) tr.engine().owned_grad(0).data<float>()[0] = std::nanf("");  // this rank's reduced grad only
      });
      const auto m = t.step();
      EXPECT_TRUE(m.skipped) << "rank " << r;
      EXPECT_EQ(gathered(t), after_first);
      t.set_after_reduction({});
      const auto m3 = t.step();
      EXPECT_FALSE(m3.skipped);
      params[size_t(r)] = gathered(t);
      opt_steps[size_t(r)] = t.engine().optimizer_steps();
      windows[size_t(r)] = t.loader().state().windows;
      EXPECT_EQ(t.steps_done(), 3);
    });
    EXPECT_EQ(params[0], params[1]);
    EXPECT_EQ(opt_steps[0], 2);
    EXPECT_EQ(opt_steps[1], 2);
    EXPECT_EQ(windows[0], 3);
    EXPECT_EQ(windows[1], 3);
  }
}

// Persistent bytes per rank follow docs/math.md (M.26) on the padded sizes, and
// the allocator's accounting agrees exactly once each buffer is rounded as
// the allocator rounds it (one buffer per unit, or one flat gradient buffer
// under stages 0-1).
TEST(DataParallel, PersistentMemoryMatchesFormulas) {
  for (int stage : {0, 1, 2, 3}) {
    auto cfg = layout(4, 1, 1, stage, true);
    with_trainers(cfg, varied_documents(32, 3), std::nullopt, [&](train::Trainer& t) {
      t.step();
      const auto& plan = t.engine().plan();
      const auto want = plan.persistent_bytes(PrecisionPolicy::uniform(DType::F32));
      const int64_t full = plan.padded_total() * 4;
      // The formulas themselves.
      switch (stage) {
        case 0: EXPECT_EQ(want.total(), full * 4); break;                  // P + G + O (O = 2P)
        case 1: EXPECT_EQ(want.total(), 2 * full + 2 * full / 4); break;   // P + G + O/R
        case 2: EXPECT_EQ(want.total(), full + 3 * full / 4); break;       // P + (G + O)/R
        case 3: EXPECT_EQ(want.total(), 4 * full / 4); break;              // (P + G + O)/R
      }
      const auto& tr = t.context().allocator->tracker();
      auto rounded = [](int64_t elements) { return int64_t(CachingAllocator::rounded_size(size_t(elements) * 4)); };
      int64_t params = 0, grads = stage < 2 ? rounded(plan.padded_total()) : 0, optimizer = 0;
      for (int u = 0; u < plan.num_units(); ++u) {
        params += rounded(stage == 3 ? plan.unit(u).shard : plan.unit(u).padded);
        if (stage >= 2) grads += rounded(plan.unit(u).shard);
        optimizer += 2 * rounded(plan.owned_numel(u));
      }
      EXPECT_EQ(tr.current(MemCategory::Params), params);
      EXPECT_EQ(tr.current(MemCategory::Grads), grads);
      EXPECT_EQ(tr.current(MemCategory::Optimizer), optimizer);
      // The rounding is small against the state (the formulas are what is stored).
      EXPECT_LT(params - want.params, want.params / 50);
      EXPECT_LT(optimizer - want.optimizer, want.optimizer / 50);
      EXPECT_EQ(tr.current(MemCategory::Gathered), 0);
      EXPECT_EQ(tr.current(MemCategory::Comm), 0);
      if (stage == 3) {
        EXPECT_GT(tr.peak(MemCategory::Gathered), 0);
      }
    });
  }
}

// Validation splits the rows over replicas; a replica that runs out of rows
// keeps joining the collectives (stage 3 gathers) and the loss equals the
// single-rank one.
TEST(DataParallel, ValidationLossMatchesSingleRank) {
  const auto train_ds = varied_documents(32, 3), val_ds = varied_documents(7, 11);
  auto eval = [&](int R, int stage) {
    auto cfg = layout(R, 1, 1, stage, true);
    train::EvalResult r;
    std::mutex mu;
    with_trainers(cfg, train_ds, val_ds, [&](train::Trainer& t) {
      const auto e = t.evaluate();
      std::lock_guard<std::mutex> lock(mu);
      r = e;
    });
    return r;
  };
  const auto ref = eval(1, 0);
  EXPECT_GT(ref.targets, 0);
  for (int stage : {0, 3}) {
    const auto got = eval(4, stage);
    EXPECT_EQ(got.targets, ref.targets);
    EXPECT_NEAR(got.loss, ref.loss, 1e-6 * ref.loss);
  }
}

// GPT-2 style (tied embeddings: the head is unit 0, used again after the
// last block; LayerNorm, learned positions, GELU, biases) under every stage.
TEST(DataParallel, TiedEmbeddingsUnderEveryStage) {
  auto gpt2 = [](train::TrainConfig c) {
    c.model.norm = model::NormKind::LayerNorm;
    c.model.positions = model::PositionKind::Learned;
    c.model.mlp = model::MlpKind::Gelu;
    c.model.tied_embeddings = true;
    c.model.bias = true;
    c.model.n_kv_heads = c.model.n_heads;
    return c;
  };
  const Outcome ref = run_layout(gpt2(layout(1, 1, 4, 0, true)));
  Outcome stage0;
  for (int stage : {0, 1, 2, 3})
    for (bool reshard : {true, false}) {
      if (stage != 3 && !reshard) continue;
      SCOPED_TRACE(::testing::Message() << "stage=" << stage << " reshard=" << reshard);
      const Outcome o = run_layout(gpt2(layout(2, 2, 1, stage, reshard)));
      EXPECT_LT(max_abs_diff(o.params, ref.params), 1e-6);
      if (stage == 0) stage0 = o;
      else EXPECT_EQ(o.params, stage0.params);
    }
}

// A rank that fails mid-step fails the job on every rank with its error;
// the peers blocked in the step's collectives wake up instead of hanging.
TEST(DataParallel, ARankFailingMidStepStopsEveryRank) {
  for (int stage : {0, 3}) {
    auto cfg = layout(2, 1, 2, stage, true);
    const auto start = std::chrono::steady_clock::now();
    try {
      with_trainers(cfg, varied_documents(32, 3), std::nullopt, [&](train::Trainer& t) {
        t.step();
        t.set_after_reduction([&](train::Trainer& tr) {
          if (tr.context().rank == 1) MT_THROW(DataError, "shard 7 of rank 1 is unreadable");
        });
        t.step();
        t.step();
      });
      FAIL() << "the failure must reach the caller";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("shard 7 of rank 1"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "peers must not wait for the timeout";
  }
}
