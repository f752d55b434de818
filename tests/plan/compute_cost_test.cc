// Covers src/meshtrain/plan/compute_cost.cc: what one rank computes under
// expert and context parallelism, against hand counts from docs/math.md
// (section 16, "Segment costs"). Per micro-batch of `rows` rows of s
// positions, n = rows * s / cp positions on the rank:
//   a linear layer out x in:  6 n out in         (y = x W^T, dx, dW)
//   causal attention:         (1 + 2.5) * 2 rows H s^2 D / cp
//   a SwiGLU feed-forward of f hidden units over m rows:  6 * 3 d f m
//   an MoE block: the router 6 n E d, the experts 6 * 3 d f * X with X the
//     rows dispatched to the rank's experts, the shared expert 6 * 3 d f n;
//     balanced routing gives each expert min(C, s k / E) rows of each row
//     (C = ceil(f_c s k / E), no cap when f_c = 0) from each of the ep ranks
//     of its group, so X = rows * E * min(C, s k / E) on every rank.
// No recomputation: a step's FLOPs are G times the micro-batch's, the
// embedding gather none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "meshtrain/plan/compute_cost.h"
#include "meshtrain/plan/hardware.h"
#include "meshtrain/plan/prediction.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/meta_step.h"
#include "meshtrain/train/plan_inputs.h"
#include "plan/test_machine.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

// d = 16, 2 layers, 2 heads of D = 8 (1 KV head), SwiGLU f = 16, vocab 259
// (untied head), 2 rows of 16 positions per micro-batch, G = 2.
train::TrainConfig tiny_base() {
  auto cfg = tiny_train_config();
  cfg.model.ffn_hidden = 16;
  cfg.training.micro_batch = 2;
  cfg.training.grad_accum = 2;
  return cfg;
}

train::TrainConfig tiny(const std::string& layout) {
  return train::with_layout(tiny_base(), train::parse_layout(layout));
}

// 4 experts of f = 16, top-2.
train::TrainConfig tiny_moe(const std::string& layout, double capacity, bool shared) {
  auto cfg = tiny_base();
  cfg.model.n_experts = 4;
  cfg.model.experts_top_k = 2;
  cfg.model.moe_capacity_factor = capacity;
  cfg.model.moe_shared_expert = shared;
  return train::with_layout(cfg, train::parse_layout(layout));
}

plan::Prediction predict(const train::TrainConfig& cfg, const plan::HardwareProfile* hw = nullptr) {
  return plan::predict(train::step_inputs(cfg), train::meta_step_recorder(), hw, /*brackets=*/false);
}

// The hand count of the header for one rank's step; expert_rows: X per
// micro-batch (0: dense blocks with a feed-forward of f over the n rows).
double hand_flops(const train::TrainConfig& cfg, double expert_rows, bool moe, bool shared) {
  const auto& m = cfg.model;
  const double d = double(m.d_model), D = double(m.d_model / m.n_heads), H = double(m.n_heads);
  const double q = H * D, kv = double(m.n_kv_heads) * D, f = double(m.ffn_hidden), V = double(m.vocab_size);
  const double rows = double(cfg.training.micro_batch), s = double(cfg.data.seq_len), cp = double(cfg.parallel.cp);
  const double n = rows * s / cp;
  double block = 6 * n * (d * q + 2 * d * kv + q * d) + 3.5 * 2 * rows * H * s * s * D / cp;
  if (!moe) block += 6 * 3 * d * f * n;
  if (moe) block += 6 * n * double(m.n_experts) * d + 6 * 3 * d * f * expert_rows + (shared ? 6 * 3 * d * f * n : 0);
  const double head = 6 * n * V * d;
  return double(cfg.training.grad_accum) * (double(m.n_layers) * block + head);
}

// X of the header: rows * E * min(C, s k / E).
double balanced_expert_rows(const train::TrainConfig& cfg) {
  const auto& m = cfg.model;
  const double s = double(cfg.data.seq_len), per = s * double(m.experts_top_k) / double(m.n_experts);
  const double cap = m.moe_capacity_factor > 0 ? std::ceil(m.moe_capacity_factor * per) : per;
  return double(cfg.training.micro_batch) * double(m.n_experts) * std::min(cap, per);
}

// A machine whose every GEMM runs at one rate, with no fixed costs, so a
// rank's compute time is its FLOPs and bytes over two rates.
plan::HardwareProfile flat_machine() { return test_machine("flat", 8, false, {}); }

}  // namespace

// Each rank computes the router over its tokens and its experts over the
// tokens dispatched to them: with ep = 2 half the experts over twice the
// tokens each, the same FLOPs as ep = 1 under balanced routing.
TEST(ComputeCost, MoeRankFlopsMatchTheHandCount) {
  struct Case {
    const char* layout;
    double capacity;
    bool shared;
  };
  for (const Case& c : {Case{"dp=2,ep=2", 0.0, false}, Case{"dp=2", 0.0, false}, Case{"dp=2,ep=2", 0.5, true},
                        Case{"dp=2", 0.5, true}}) {
    SCOPED_TRACE(::testing::Message() << c.layout << " capacity " << c.capacity << " shared " << c.shared);
    const auto cfg = tiny_moe(c.layout, c.capacity, c.shared);
    const plan::Prediction p = predict(cfg);
    ASSERT_EQ(p.classes.size(), 1u);
    const double want = hand_flops(cfg, balanced_expert_rows(cfg), true, c.shared);
    EXPECT_DOUBLE_EQ(p.classes[0].flops, want);
    EXPECT_DOUBLE_EQ(p.executed_flops_per_step, 2 * want);
  }
}

// The MoE step executes what the model without its feed-forwards does plus
// the router and the experts (the dense model's step minus its FFN FLOPs).
TEST(ComputeCost, MoeStepAddsTheExpertFlopsToTheFfnFreeModel) {
  const auto dense = tiny("dp=2");
  const auto moe = tiny_moe("dp=2,ep=2", 0.0, false);
  const double ranks = 2, G = double(dense.training.grad_accum), L = double(dense.model.n_layers);
  const double d = double(dense.model.d_model), f = double(dense.model.ffn_hidden), E = double(moe.model.n_experts);
  const double n = double(dense.training.micro_batch * dense.data.seq_len);
  const double ffn_free = predict(dense).executed_flops_per_step - ranks * G * L * 6 * 3 * d * f * n;
  const double experts = ranks * G * L * (6 * n * E * d + 6 * 3 * d * f * balanced_expert_rows(moe));
  EXPECT_GT(experts, 0);
  EXPECT_DOUBLE_EQ(predict(moe).executed_flops_per_step, ffn_free + experts);
}

// A cp rank computes seq / cp positions of each row and 1/cp of the causal
// score pairs (docs/math.md (M.48)).
TEST(ComputeCost, ContextParallelRankComputesItsShare) {
  for (const char* layout : {"cp=2", "dp=2,cp=2", "cp=4"}) {
    SCOPED_TRACE(layout);
    const auto cfg = tiny(layout);
    const plan::Prediction p = predict(cfg);
    ASSERT_EQ(p.classes.size(), 1u);
    EXPECT_DOUBLE_EQ(p.classes[0].flops, hand_flops(cfg, 0, false, false));
  }
}

// At the same rows per micro-batch every priced term of a cp = 2 rank is
// half the cp = 1 rank's: on a machine of one GEMM rate and no fixed costs
// its compute (the ring's transfers aside) takes exactly half the time.
TEST(ComputeCost, ContextParallelRankTakesHalfTheComputeTime) {
  const plan::HardwareProfile hw = flat_machine();
  const plan::Prediction one = predict(tiny("dp=1"), &hw), two = predict(tiny("cp=2"), &hw);
  ASSERT_TRUE(one.time && two.time);
  const plan::RankTime& a = one.time->ranks.at(0);
  const plan::RankTime& b = two.time->ranks.at(0);
  EXPECT_GT(a.compute_s, 0);
  EXPECT_NEAR((b.compute_s - b.tp_comm_s) / (a.compute_s - a.tp_comm_s), 0.5, 1e-12);
}

// The GEMM classes sample one curve of the smallest dimension: between two
// classes the rate is interpolated in log2 of it (a dimension of 32 is
// halfway from 16 to 64), below the first it is the first's, above the last
// the last's, and never above the peak.
TEST(ComputeCost, GemmRateInterpolatesBetweenClassesInLog2OfTheSmallestDimension) {
  std::string toml = test_machine_toml("classes", 1, true, {});
  toml.replace(toml.find("fp32 = [{ min_dim = 1, tflops = 1.0 }]"), 38,
               "fp32 = [{ min_dim = 16, tflops = 0.2 }, { min_dim = 64, tflops = 0.6 }, { min_dim = 256, tflops = 0.8 },"
               " { min_dim = 1024, tflops = 1.5 }]");
  const plan::HardwareProfile hw = plan::parse_hardware(toml, "classes.toml");
  EXPECT_DOUBLE_EQ(hw.gemm_rate(DType::F32, 1024, 8, 1024), 0.2e12);    // below the first class
  EXPECT_DOUBLE_EQ(hw.gemm_rate(DType::F32, 1024, 1024, 16), 0.2e12);   // on a class
  EXPECT_NEAR(hw.gemm_rate(DType::F32, 32, 1024, 1024), 0.4e12, 1e3);   // log2 halfway from 16 to 64
  EXPECT_NEAR(hw.gemm_rate(DType::F32, 1024, 128, 512), 0.7e12, 1e3);  // log2 halfway from 64 to 256
  EXPECT_NEAR(hw.gemm_rate(DType::F32, 512, 512, 512), 1.0e12, 1e3);   // 1.15 between 256 and 1024: the peak
  EXPECT_DOUBLE_EQ(hw.gemm_rate(DType::F32, 4096, 4096, 4096), 1.0e12);  // the last class, above the peak
}

// training.head_chunk_rows: the LM head's GEMMs, loss and weight gradient
// all run in B (chunk by chunk); F keeps the final norm. The same work, the
// same time, only moved between passes.
TEST(ComputeCost, TheHeadInRowChunksRunsItsGemmsAndLossInB) {
  const plan::HardwareProfile hw = flat_machine();
  auto cfg = tiny("dp=1");
  cfg.model.finalize();
  const plan::ComputeModel cm(cfg.model, plan::local_dims(cfg.model, model::build_model_spec(cfg.model)),
                              cfg.precision(), &hw);
  plan::StepInputs in = train::step_inputs(cfg);
  const plan::TraceBatch b = plan::trace_batch(in);
  const int head = int(cfg.model.n_layers) + 1;
  const plan::SegmentCost whole = cm.segment(head, b, in);
  in.head_chunk_rows = 8;
  const plan::SegmentCost part = cm.segment(head, b, in);
  EXPECT_EQ(part.f.flops, 0.0);
  EXPECT_GT(part.f.seconds, 0.0) << "the final norm stays in F";
  EXPECT_LT(part.f.seconds, whole.f.seconds / 10);
  EXPECT_EQ(part.w.flops, 0.0);
  EXPECT_EQ(part.w.seconds, 0.0);
  EXPECT_DOUBLE_EQ(part.b.flops, whole.f.flops + whole.b.flops + whole.w.flops);
  const double total = whole.f.seconds + whole.b.seconds + whole.w.seconds;
  EXPECT_NEAR(part.f.seconds + part.b.seconds, total, 1e-12 * total);
  // Every other segment is unchanged.
  for (int s = 0; s < head; ++s) {
    in.head_chunk_rows = 0;
    const plan::SegmentCost a = cm.segment(s, b, in);
    in.head_chunk_rows = 8;
    const plan::SegmentCost c = cm.segment(s, b, in);
    EXPECT_EQ(a.f.seconds + a.b.seconds + a.w.seconds, c.f.seconds + c.b.seconds + c.w.seconds) << "segment " << s;
  }
}
