// Mixed precision (docs/math.md, "Rule: precision is reported per role"): bf16 / fp16
// weights and matmul inputs with f32 accumulation, f32 master weights and moments;
// data parallelism and ZeRO under it; fp16 dynamic loss scaling with the skip decided
// jointly by every rank; exact resume with the scaler state; memory per policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>

#include "meshtrain/checkpoint/reader.h"
#include "support/numeric.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

namespace {

struct Trace {
  std::vector<double> losses, params, scales;
  std::vector<bool> skipped;
};

train::TrainConfig mixed(const std::string& precision, int R, int G, int stage) {
  auto cfg = tiny_train_config();
  cfg.training.precision = precision;
  cfg.optimizer.lr = 1e-3;
  cfg.parallel.dp = R;
  cfg.parallel.zero_stage = stage;
  cfg.parallel.bucket_mb = 0.01;
  cfg.training.grad_accum = G;
  cfg.training.micro_batch = 1;
  return cfg;
}

Trace run(const train::TrainConfig& cfg, int steps, const std::function<void(train::Trainer&, int)>& before = {}) {
  Trace out;
  std::mutex mu;
  std::vector<Trace> per_rank(size_t(cfg.parallel.dp));
  with_trainers(cfg, varied_documents(96, 3), std::nullopt, [&](train::Trainer& t) {
    Trace r;
    for (int s = 0; s < steps; ++s) {
      if (before) before(t, s);
      const auto m = t.step();
      r.losses.push_back(m.loss);
      r.scales.push_back(m.loss_scale);
      r.skipped.push_back(m.skipped);
    }
    r.params = gathered(t);
    std::lock_guard<std::mutex> lock(mu);
    per_rank[size_t(t.context().rank)] = r;
  });
  for (const Trace& r : per_rank) {
    EXPECT_EQ(r.skipped, per_rank[0].skipped) << "every rank makes the same skip decision";
    EXPECT_EQ(r.scales, per_rank[0].scales);
    EXPECT_EQ(r.params, per_rank[0].params);
  }
  return per_rank[0];
}

}  // namespace

TEST(MixedPrecision, PolicyParsingAndDescription) {
  const auto bf16 = PrecisionPolicy::from_name("bf16");
  EXPECT_EQ(bf16.params, DType::BF16);
  EXPECT_EQ(bf16.master, DType::F32);
  EXPECT_TRUE(bf16.has_master_copy());
  EXPECT_FALSE(bf16.needs_loss_scaling());
  EXPECT_TRUE(PrecisionPolicy::from_name("fp16").needs_loss_scaling());
  EXPECT_EQ(PrecisionPolicy::from_name("bf16", "bf16").grad_reduce, DType::BF16);
  EXPECT_THROW(PrecisionPolicy::from_name("fp32", "bf16"), ConfigError);
  EXPECT_THROW(PrecisionPolicy::from_name("bf16", "fp16"), ConfigError);
  EXPECT_THROW(PrecisionPolicy::from_name("fp8"), ConfigError);
  EXPECT_EQ(bf16.describe(),
            "params bf16, matmul inputs bf16, accumulate f32, outputs f32, grads f32, grad reduce f32, master f32, "
            "optimizer state f32");
  PrecisionPolicy odd = bf16;
  odd.optimizer = DType::BF16;
  EXPECT_THROW(odd.validate(), ConfigError);
}

// bf16 under dp in {2, 4} x ZeRO 0-3 against one rank holding the same
// global window (f32 masters; fp32 gradient reduction): the reduction order
// differs, the 16-bit rounding of each matmul input does not, so the update
// agrees to f32 rounding (1e-6 absolute after 3 AdamW steps at lr 1e-3);
// ZeRO stage changes alone stay bitwise.
TEST(MixedPrecision, Bf16DataParallelMatchesOneRankAndStagesAreBitwise) {
  const Trace ref = run(mixed("bf16", 1, 4, 0), 3);
  const Trace fp32 = run([] {
    auto c = mixed("fp32", 1, 4, 0);
    return c;
  }(), 3);
  EXPECT_GT(max_abs_diff(ref.params, fp32.params), 0) << "bf16 must actually round the matmul inputs";
  for (int R : {2, 4}) {
    Trace stage0;
    for (int stage : {0, 1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << "R=" << R << " stage=" << stage);
      const Trace o = run(mixed("bf16", R, 4 / R, stage), 3);
      for (size_t s = 0; s < ref.losses.size(); ++s) EXPECT_NEAR(o.losses[s], ref.losses[s], 1e-5 * ref.losses[s]);
      EXPECT_LT(max_abs_diff(o.params, ref.params), 1e-6);
      if (stage == 0) stage0 = o;
      else EXPECT_EQ(o.params, stage0.params) << "ZeRO stage changes must stay bitwise under bf16";
    }
  }
}

// Gradients reduced in bf16: half the bytes on the wire, and the reduced
// gradient within bf16 rounding (2^-8 relative per value, two replicas) of
// the f32 reduction — not equal to it.
TEST(MixedPrecision, Bf16GradientReduction) {
  auto f32_wire = mixed("bf16", 2, 2, 1), bf16_wire = f32_wire;
  bf16_wire.training.grad_reduce_dtype = "bf16";
  for (int stage : {0, 1, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    f32_wire.parallel.zero_stage = bf16_wire.parallel.zero_stage = stage;
    std::vector<double> grads[2];
    int64_t bytes[2] = {0, 0};
    std::mutex mu;
    for (int wire = 0; wire < 2; ++wire)
      with_trainers(wire ? bf16_wire : f32_wire, varied_documents(96, 3), std::nullopt, [&](train::Trainer& t) {
        const auto m = t.step();
        auto g = gathered(t, true);
        std::lock_guard<std::mutex> lock(mu);
        if (t.context().rank == 0) grads[wire] = g, bytes[wire] = m.comm_bytes;
      });
    EXPECT_EQ(bytes[1] * 2, bytes[0]) << "bf16 halves the gradient bytes";
    double scale = 0;
    for (double g : grads[0]) scale = std::max(scale, std::abs(g));
    EXPECT_LT(max_abs_diff(grads[0], grads[1]), scale * 2.0 / 256);
    EXPECT_GT(max_abs_diff(grads[0], grads[1]), 0) << "the wire must be bf16";
  }
}

// fp16 with an initial scale that overflows: the first steps are skipped on
// every rank identically, the scale backs off, training proceeds.
TEST(MixedPrecision, Fp16OverflowingScaleBacksOffAndEveryRankSkipsTheSameSteps) {
  auto cfg = mixed("fp16", 2, 1, 2);
  cfg.training.micro_batch = 2;
  cfg.training.loss_scale.initial = std::ldexp(1.0, 26);  // scaled output gradients beyond f16's 65504
  cfg.training.loss_scale.hysteresis = 1;
  cfg.training.loss_scale.growth_interval = 100;
  const Trace r = run(cfg, 20);
  int skipped = 0;
  while (skipped < int(r.skipped.size()) && r.skipped[size_t(skipped)]) ++skipped;
  EXPECT_GT(skipped, 0) << "2^26 must overflow";
  // Every skip halves the scale (hysteresis 1); finite steps keep it (no
  // growth within 100 steps).
  for (size_t s = 0; s + 1 < r.skipped.size(); ++s)
    EXPECT_EQ(r.scales[s + 1], r.skipped[s] ? r.scales[s] / 2 : r.scales[s]) << "step " << s + 1;
  EXPECT_GE(std::count(r.skipped.begin(), r.skipped.end(), false), 10) << "the scale must come down far enough to train";
  for (double p : r.params) ASSERT_TRUE(std::isfinite(p));
  EXPECT_TRUE(std::isfinite(r.losses.back()));
}

// A NaN in one rank's reduced gradient skips the step everywhere, under
// both 16-bit policies, and counts it.
TEST(MixedPrecision, NanOnOneRankSkipsEverywhere) {
  for (const std::string p : {"bf16", "fp16"}) {
    SCOPED_TRACE(p);
    auto cfg = mixed(p, 2, 1, 0);
    cfg.training.micro_batch = 2;
    const Trace r = run(cfg, 3, [](train::Trainer& t, int s) {
      t.set_after_reduction([s](train::Trainer& tr) {
        if (s == 1 && tr.context().rank == 1) tr.engine().owned_grad(1).data<float>()[3] = std::nanf("");
      });
    });
    EXPECT_EQ(r.skipped, (std::vector<bool>{false, true, false}));
  }
}

// Exact resume under fp16: the loss scaler's state travels with the
// checkpoint, so a run interrupted after 3 steps continues bit for bit.
TEST(MixedPrecision, Fp16ResumeIsExactWithTheScalerState) {
  const fs::path dir = fs::path(::testing::TempDir()) / "mt_fp16_resume";
  fs::remove_all(dir);
  auto cfg = mixed("fp16", 2, 1, 3);
  cfg.training.micro_batch = 2;
  cfg.training.loss_scale.initial = std::ldexp(1.0, 20);
  cfg.training.loss_scale.growth_interval = 2;  // the scale changes during the run
  cfg.training.loss_scale.hysteresis = 1;
  cfg.checkpoint.dir = dir.string();
  const Trace straight = run(cfg, 6);
  std::vector<double> resumed_scales;
  std::vector<double> params;
  std::mutex mu;
  with_trainers(cfg, varied_documents(96, 3), std::nullopt, [&](train::Trainer& t) {
    for (int s = 0; s < 3; ++s) t.step();
    t.save_checkpoint();
  });
  with_trainers(cfg, varied_documents(96, 3), std::nullopt, [&](train::Trainer& t) {
    t.resume_or_init();
    EXPECT_EQ(t.steps_done(), 3);
    std::vector<double> scales;
    for (int s = 0; s < 3; ++s) scales.push_back(t.step().loss_scale);
    auto p = gathered(t);
    std::lock_guard<std::mutex> lock(mu);
    if (t.context().rank == 0) resumed_scales = scales, params = p;
  });
  EXPECT_EQ(resumed_scales, std::vector<double>(straight.scales.begin() + 3, straight.scales.end()));
  EXPECT_EQ(params, straight.params) << "resume must continue bit for bit";
  fs::remove_all(dir);
}

// A bf16 / fp16 checkpoint saved under dp=2, ZeRO-3 (masters and moments
// sharded) loads into other layouts: the f32 masters and the moments come
// back bit for bit (written back by the target layout), the fp16 scaler's
// state travels with them, and the next step matches the source's (loss
// within 1e-5 relative: the reduction order changes with R).
TEST(MixedPrecision, CheckpointsReshardWithTheMastersAndTheScaler) {
  const auto ds = varied_documents(96, 3);
  for (const std::string precision : {"bf16", "fp16"}) {
    auto layout = [&](int R, int stage, const fs::path& dir) {
      auto cfg = mixed(precision, R, 1, stage);
      cfg.training.micro_batch = 4 / R;  // a global window of 4 rows at every R
      cfg.training.loss_scale.initial = std::ldexp(1.0, 20);
      cfg.training.loss_scale.growth_interval = 2;  // the scale moves before the save
      cfg.training.loss_scale.hysteresis = 1;
      cfg.checkpoint.dir = dir.string();
      cfg.checkpoint.keep_last = 10;
      return cfg;
    };
    const fs::path src = fresh_dir("mp_src_" + precision);
    double next_loss = 0, next_scale = 0, saved_scale = 0;
    std::mutex mu;
    with_trainers(layout(2, 3, src), ds, std::nullopt, [&](train::Trainer& t) {
      double scale = 0;
      for (int s = 0; s < 3; ++s) scale = t.step().loss_scale;
      t.save_checkpoint();
      const auto m = t.step();
      std::lock_guard<std::mutex> lock(mu);
      saved_scale = scale, next_loss = m.loss, next_scale = m.loss_scale;
    });
    const auto src_tensors = tensors_of(src);
    const auto reader = checkpoint::CheckpointReader::open(src.string());
    for (const auto& name : reader.names())
      EXPECT_EQ(reader.tensor(name).dtype, DType::F32) << precision << " " << name << ": masters are kept in f32";
    if (precision == "fp16") {
      EXPECT_NE(saved_scale, std::ldexp(1.0, 20)) << "the scaler moved before the save";
    }
    for (auto [R, stage] : {std::pair{1, 0}, std::pair{4, 1}, std::pair{4, 3}}) {
      SCOPED_TRACE(::testing::Message() << precision << " to dp=" << R << " zero=" << stage);
      const fs::path out = fresh_dir("mp_dst");
      double loss = 0, scale = 0;
      with_trainers(layout(R, stage, out), ds, std::nullopt, [&](train::Trainer& t) {
        t.restore(checkpoint::CheckpointReader::open(src.string()));
        t.save_checkpoint();  // what the target layout holds, written back
        const auto m = t.step();
        std::lock_guard<std::mutex> lock(mu);
        loss = m.loss, scale = m.loss_scale;
      });
      EXPECT_EQ(tensors_of(out), src_tensors);
      EXPECT_NEAR(loss, next_loss, 1e-5 * next_loss);
      EXPECT_EQ(checkpoint::CheckpointReader::open(out.string()).metadata().at("loss_scaler"),
                reader.metadata().at("loss_scaler"))
          << "the loss scaler's state travels with the checkpoint";
      EXPECT_EQ(scale, next_scale);
    }
  }
}

// The allocator's accounting per category follows the policy's bytes per
// parameter under every ZeRO stage (f32 masters count as optimizer state).
TEST(MixedPrecision, PersistentMemoryFollowsThePolicy) {
  for (int stage : {0, 1, 2, 3}) {
    auto cfg = mixed("bf16", 4, 1, stage);
    with_trainers(cfg, varied_documents(32, 3), std::nullopt, [&](train::Trainer& t) {
      t.step();
      const auto& plan = t.engine().plan();
      const auto want = plan.persistent_bytes(t.precision());
      const auto& tr = t.context().allocator->tracker();
      auto rounded = [](int64_t bytes) { return int64_t(CachingAllocator::rounded_size(size_t(bytes))); };
      int64_t params = 0, grads = stage < 2 ? rounded(plan.padded_total() * 4) : 0, optimizer = 0;
      for (int u = 0; u < plan.num_units(); ++u) {
        params += rounded((stage == 3 ? plan.unit(u).shard : plan.unit(u).padded) * 2);
        if (stage >= 2) grads += rounded(plan.unit(u).shard * 4);
        optimizer += 3 * rounded(plan.owned_numel(u) * 4);  // m, v and the master
      }
      EXPECT_EQ(tr.current(MemCategory::Params), params) << "stage " << stage;
      EXPECT_EQ(tr.current(MemCategory::Grads), grads) << "stage " << stage;
      EXPECT_EQ(tr.current(MemCategory::Optimizer), optimizer) << "stage " << stage;
      EXPECT_LT(params - want.params, want.params / 50);
      EXPECT_LT(optimizer - want.optimizer, want.optimizer / 50);
    });
  }
}

// Training quality: on the same steps, bf16 and fp16 reach the fp32 loss within 0.03 nats (docs/math.md,
// "Rule: precision is reported per role": the policies change rounding, not the objective).
TEST(MixedPrecision, SixteenBitTrainingTracksFp32) {
  auto base = tiny_train_config();
  base.model.d_model = 32;
  base.model.ffn_hidden = 64;
  base.optimizer.lr = 3e-3;
  base.training.micro_batch = 8;
  auto at = [&](const std::string& p) {
    auto c = base;
    c.training.precision = p;
    c.training.loss_scale.initial = 1024;
    const Trace r = run(c, 40);
    double tail = 0;
    for (size_t s = r.losses.size() - 5; s < r.losses.size(); ++s) tail += r.losses[s] / 5;
    return std::pair(r.losses.front(), tail);
  };
  const auto fp32 = at("fp32"), bf16 = at("bf16"), fp16 = at("fp16");
  EXPECT_NEAR(bf16.second, fp32.second, 0.03);
  EXPECT_NEAR(fp16.second, fp32.second, 0.03);
  EXPECT_LT(fp32.second, fp32.first - 0.3) << "the fixture must learn something";
}
