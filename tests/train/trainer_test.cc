#include "meshtrain/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/numeric.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {


struct RunResult {
  std::vector<double> losses, grad_norms;
  std::vector<int64_t> counts;
  std::vector<double> params;
};

RunResult run(train::TrainConfig cfg, const std::string& mode) {
  cfg.data.mode = mode;
  RunResult r;
  with_trainers(cfg, varied_documents(64, 3), std::nullopt, [&](train::Trainer& t) {
    for (int s = 0; s < 3; ++s) {
      const auto m = t.step();
      r.losses.push_back(m.loss);
      r.grad_norms.push_back(m.grad_norm);
      r.counts.push_back(m.supervised);
    }
    r.params = gathered(t);
  });
  return r;
}

}  // namespace

// G micro-batches with unequal supervised counts give the update of one
// batch holding the same rows (docs/math.md (M.4)-(M.5)). fp32 with a different
// reduction order (per-micro-batch GEMM sums), then 3 AdamW steps at lr 1e-3:
// parameters agree within 2e-6 absolute (updates total up to 3e-3; measured
// 0.06e-6 to 1.2e-6 over the kernel ISA levels: Adam's m / sqrt(v) turns
// rounding of near-zero gradients into update differences), losses and the
// gradient norms within 1e-5 relative (AdamW hides a gradient scaled by a
// constant; the norm does not).
TEST(Trainer, AccumulationEqualsOneBigBatch) {
  for (const std::string mode : {"padded", "packed"}) {
    auto cfg = tiny_train_config();
    cfg.optimizer.lr = 1e-3;
    cfg.training.micro_batch = 8;
    cfg.training.grad_accum = 1;
    const RunResult big = run(cfg, mode);
    for (auto [B, G] : {std::pair{4, 2}, std::pair{2, 4}, std::pair{1, 8}}) {
      cfg.training.micro_batch = B;
      cfg.training.grad_accum = G;
      const RunResult acc = run(cfg, mode);
      EXPECT_EQ(acc.counts, big.counts) << mode << " B=" << B;
      for (int s = 0; s < 3; ++s) {
        EXPECT_NEAR(acc.losses[s], big.losses[s], 1e-5 * big.losses[s]) << mode;
        EXPECT_NEAR(acc.grad_norms[s], big.grad_norms[s], 1e-5 * big.grad_norms[s]) << mode << " B=" << B;
      }
      EXPECT_LT(max_abs_diff(acc.params, big.params), 2e-6) << mode << " B=" << B << " G=" << G;
    }
  }
}

// The naive mean of per-micro-batch means is a different objective when
// counts differ (docs/math.md (M.5)): its gradient differs from the global-token one.
TEST(Trainer, MeanOfMeansIsADifferentObjective) {
  auto cfg = tiny_train_config();
  cfg.model.finalize();
  auto ds = varied_documents(64, 3);
  data::BatchLoader loader(ds, data::LoaderConfig{data::BatchMode::Padded, 16, 1, 16});
  data::Batch window;
  loader.next_window(4, 0, 4, &window);
  auto alloc = CachingAllocator::create();
  model::ExecOptions f64;
  f64.precision = PrecisionPolicy::uniform(DType::F64);
  model::Transformer m(cfg.model, alloc, f64);
  const int64_t seq = window.seq;
  auto rows = [&](int64_t first, int64_t n) {
    const int64_t off = first * seq;
    return model::TokenBatch{n, seq, window.tokens.data() + off, window.targets.data() + off,
                             window.positions.data() + off, window.segments.data() + off};
  };
  auto grads = [&]() {
    std::vector<double> g;
    for (int u = 0; u < m.params().num_units(); ++u)
      for (double v : m.params().unit_grads(u).span<double>()) g.push_back(v);
    return g;
  };
  const int64_t N = window.supervised_targets;
  m.params().zero_grads();
  m.forward_backward(rows(0, 4), 1.0 / double(N));
  const auto big = grads();

  // Global normalization over micro-batches: same gradient.
  m.params().zero_grads();
  std::vector<int64_t> counts;
  for (int j = 0; j < 4; ++j) counts.push_back(m.forward_backward(rows(j, 1), 1.0 / double(N)).count);
  EXPECT_LT(max_abs_diff(grads(), big), 1e-12);
  ASSERT_NE(counts[0], counts[1]) << "fixture must give unequal counts";

  // Mean of per-micro-batch means: a different gradient.
  m.params().zero_grads();
  for (int j = 0; j < 4; ++j) m.forward_backward(rows(j, 1), 1.0 / (4.0 * double(counts[j])));
  EXPECT_GT(max_abs_diff(grads(), big), 1e-4);
}

TEST(Trainer, WindowWithoutTargetsSkipsTheUpdate) {
  auto cfg = tiny_train_config();
  with_trainers(cfg, varied_documents(16, 1), std::nullopt, [&](train::Trainer& t) {
    data::BatchLoader loader(t.train_data(), data::LoaderConfig{data::BatchMode::Padded, 16, 1, 16});
    data::Batch w;
    loader.next_window(4, 0, 4, &w);
    std::fill(w.targets.begin(), w.targets.end(), data::kIgnore);
    w.recount();
    ASSERT_EQ(w.supervised_targets, 0);
    const auto before = gathered(t);
    const auto m = t.step_on(w);
    EXPECT_TRUE(m.skipped);
    EXPECT_EQ(m.supervised, 0);
    EXPECT_EQ(gathered(t), before);
    EXPECT_EQ(t.engine().optimizer_steps(), 0);
    EXPECT_EQ(t.steps_done(), 1);
  });
}

TEST(Trainer, LearnsAndValidates) {
  auto cfg = tiny_train_config();
  cfg.training.steps = 40;
  cfg.data.mode = "packed";
  with_trainers(cfg, varied_documents(64, 3), varied_documents(8, 99), [&](train::Trainer& t) {
    const double before = t.evaluate().loss;
    double first = 0, last = 0;
    for (int s = 0; s < 40; ++s) {
      const auto m = t.step();
      if (s == 0) first = m.loss;
      last = m.loss;
      EXPECT_GT(m.gflops, 0);
      EXPECT_GT(m.memory.peak[int(MemCategory::Activations)], 0);
    }
    const auto after = t.evaluate();
    EXPECT_GT(after.targets, 0);
    EXPECT_LT(last, first - 1.0);
    EXPECT_LT(after.loss, before - 1.0);
  });
}
