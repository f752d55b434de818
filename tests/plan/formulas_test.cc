// The closed forms of plan/formulas.h with docs/math.md's worked examples, and
// the config-free report built on them (plan/seed_terms.h).
#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/byte_size.h"
#include "meshtrain/plan/formulas.h"
#include "meshtrain/plan/seed_terms.h"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {
constexpr double GiB = 1024.0 * 1024 * 1024;
}

// docs/math.md (M.26)-(M.28) worked example: P = 12, G = 12, O = 72 GiB, R = 8.
TEST(Formulas, ZeroStateMemoryWorkedExample) {
  const double P = 12 * GiB, G = 12 * GiB, O = 72 * GiB;
  EXPECT_DOUBLE_EQ(zero_state(P, G, O, 8, 0).total(), 96 * GiB);    // (M.26), stage 0
  EXPECT_DOUBLE_EQ(zero_state(P, G, O, 8, 1).total(), 33 * GiB);    // (M.26), stage 1
  EXPECT_DOUBLE_EQ(zero_state(P, G, O, 8, 2).total(), 22.5 * GiB);  // (M.26), stage 2
  EXPECT_DOUBLE_EQ(zero_state(P, G, O, 8, 3).total(), 12 * GiB);    // (M.26), stage 3
  // With 10 GiB activations and 6 GiB workspace stage 2 peaks at 38.5 GiB;
  // stage 3 with 4 GiB gathered and 4 GiB prefetched at 36 GiB.
  EXPECT_DOUBLE_EQ(peak_bytes(zero_state(P, G, O, 8, 2), {10 * GiB, 6 * GiB, 0, 0}), 38.5 * GiB);
  EXPECT_DOUBLE_EQ(peak_bytes(zero_state(P, G, O, 8, 3), {10 * GiB, 6 * GiB, 4 * GiB, 4 * GiB}), 36 * GiB);
  // R = 1: every stage holds everything.
  for (int s = 0; s <= 3; ++s) EXPECT_DOUBLE_EQ(zero_state(P, G, O, 1, s).total(), 96 * GiB);
}

TEST(Formulas, BytesPerParameter) {
  const BytesPerParam f32 = bytes_per_param("fp32"), bf16 = bytes_per_param("bf16");
  EXPECT_EQ(f32.params + f32.grads + f32.optimizer, 16);
  EXPECT_EQ(bf16.params + bf16.grads + bf16.optimizer, 16);
  EXPECT_EQ(bf16.optimizer, 12);  // two f32 moments and an f32 master
  EXPECT_EQ(bytes_per_param("fp16-mixed").params, 2);
  EXPECT_THROW(bytes_per_param("fp8"), ConfigError);
}

// docs/math.md (M.68): 8 devices 100 min, 16 devices 60 min.
TEST(Formulas, ScalingEfficiencyWorkedExample) {
  const Scaling s = scaling_efficiency(100, 8, 60, 16);
  EXPECT_NEAR(s.speedup, 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.efficiency, 0.8333333333, 1e-9);
  EXPECT_THROW(scaling_efficiency(0, 8, 60, 16), ConfigError);
  EXPECT_THROW(scaling_efficiency(100, 0, 60, 16), ConfigError);
}

// docs/math.md (M.41)-(M.42): GPipe p = 4, m = 8.
TEST(Formulas, PipelineWorkedExample) {
  EXPECT_NEAR(pipeline_utilization(4, 8), 8.0 / 11.0, 1e-12);
  EXPECT_NEAR(pipeline_utilization(4, 8), 0.727, 5e-4);
  EXPECT_NEAR(pipeline_bubble(4, 8), 3.0 / 11.0, 1e-12);
  EXPECT_DOUBLE_EQ(pipeline_time(4, 8, 1, 2), 33);
  // The smallest m for a target bubble, and m - 1 misses it.
  for (int p : {2, 4, 8, 64})
    for (double target : {0.05, 0.1, 0.25, 0.5}) {
      const int64_t m = micro_batches_for_bubble(p, target);
      EXPECT_LE(pipeline_bubble(p, int(m)), target) << p << " " << target;
      if (m > 1) {
        EXPECT_GT(pipeline_bubble(p, int(m - 1)), target) << p << " " << target;
      }
    }
  EXPECT_EQ(micro_batches_for_bubble(4, 3.0 / 11.0), 8);
  EXPECT_THROW(micro_batches_for_bubble(4, 0), ConfigError);
  EXPECT_THROW(micro_batches_for_bubble(4, 1.5), ConfigError);
}

// docs/math.md (M.30): M(k) = A (ceil(L/k) + k), integer k, neighbours of sqrt(L) compared.
TEST(Formulas, RecomputeIntervalWorkedExamples) {
  const RecomputeChoice c16 = best_checkpoint_interval(16, 1.0);
  EXPECT_EQ(c16.k, 4);
  EXPECT_DOUBLE_EQ(c16.bytes, 8);  // 16/4 + 4
  // L = 24: sqrt = 4.9; k = 4 and 5 and 6 each give 10 (6 + 4, 5 + 5, 4 + 6): the smallest wins.
  const RecomputeChoice c24 = best_checkpoint_interval(24, 2.0);
  EXPECT_EQ(c24.k, 4);
  EXPECT_DOUBLE_EQ(c24.bytes, 20);
  bool compared_5 = false;
  for (const auto& cand : c24.compared) compared_5 = compared_5 || cand.k == 5;
  EXPECT_TRUE(compared_5);
  // Never worse than any other integer k.
  for (int64_t L : {1, 2, 7, 30, 96, 128})
    for (int64_t k = 1; k <= L; ++k)
      EXPECT_LE(best_checkpoint_interval(L, 1.0).bytes, recompute_memory(L, k, 1.0)) << L << " " << k;
  EXPECT_THROW(best_checkpoint_interval(0, 1.0), ConfigError);
  EXPECT_THROW(recompute_memory(4, 5, 1.0), ConfigError);
}

// docs/math.md (M.20): ring all-reduce 2(R-1) alpha + 2(R-1)/R M beta.
TEST(Formulas, RingCollectives) {
  EXPECT_DOUBLE_EQ(ring_time(comm::OpKind::AllReduce, 4, 1000, 1, 0.5), 6 + 0.5 * 1500);
  EXPECT_DOUBLE_EQ(ring_time(comm::OpKind::ReduceScatter, 4, 1000, 1, 0.5), 3 + 0.5 * 750);
  EXPECT_DOUBLE_EQ(ring_time(comm::OpKind::AllGather, 4, 1000, 1, 0.5), 3 + 0.5 * 750);
  EXPECT_DOUBLE_EQ(ring_time(comm::OpKind::AllReduce, 1, 1000, 1, 0.5), 0);  // a group of one sends nothing
  EXPECT_DOUBLE_EQ(ring_wire_bytes(comm::OpKind::Send, 2, 64), 64);
}

// Narayanan et al. 2021's count, and the model-FLOPs variant.
TEST(Formulas, MegatronFlops) {
  // 1.7B row: B 512, s 2048, l 24, h 2304, V 51200.
  const double f = megatron_flops(512, 2048, 24, 2304, 51200, true);
  EXPECT_NEAR(f, 96.0 * 512 * 2048 * 24 * 2304.0 * 2304 * (1 + 2048 / (6 * 2304.0) + 51200 / (16 * 24 * 2304.0)), 1);
  EXPECT_LT(megatron_flops(512, 2048, 24, 2304, 51200, false), f);
}

TEST(ByteSizes, UnitsAndErrors) {
  EXPECT_DOUBLE_EQ(parse_bytes("4096", "--x"), 4096);
  EXPECT_DOUBLE_EQ(parse_bytes("512MiB", "--x"), 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_bytes("1.5 GiB", "--x"), 1.5 * GiB);
  EXPECT_DOUBLE_EQ(parse_bytes("2TiB", "--x"), 2048 * GiB);
  EXPECT_DOUBLE_EQ(parse_bytes("3k", "--x"), 3072);
  for (const char* bad : {"-1GiB", "", "GiB", "12 parsecs"}) {
    try {
      parse_bytes(bad, "--activations");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--activations"), std::string::npos) << e.what();
    }
  }
  EXPECT_NE(std::string([] {
              try {
                parse_bytes("-4", "--workspace");
              } catch (const ConfigError& e) {
                return std::string(e.what());
              }
              return std::string();
            }())
                .find("negative"),
            std::string::npos);
  EXPECT_EQ(gib(33 * GiB), "33.00 GiB");
  EXPECT_EQ(gib(512.0 * 1024 * 1024), "512.00 MiB");
}

// The config-free report: the worked example end to end, in its own words.
TEST(SeedTerms, WorkedExampleReport) {
  SeedTerms t;
  t.params = 6 * GiB;  // 2 bytes each: P = 12 GiB, G = 12 GiB, O = 72 GiB
  t.precision = "bf16";
  t.dp = 8;
  t.zero_stage = 2;
  t.activations = 10 * GiB;
  t.workspace = 6 * GiB;
  t.device_memory = 40 * GiB;
  const std::string r = seed_terms_report(t);
  for (const char* want : {"96.00 GiB", "33.00 GiB", "22.50 GiB", "12.00 GiB", "= 38.50 GiB", "fits"})
    EXPECT_NE(r.find(want), std::string::npos) << want << " in\n" << r;
  t.zero_stage = 3;
  t.gathered = 4 * GiB;
  t.prefetch = 4 * GiB;
  t.device_memory = 35 * GiB;
  const std::string r3 = seed_terms_report(t);
  EXPECT_NE(r3.find("= 36.00 GiB"), std::string::npos) << r3;
  EXPECT_NE(r3.find("does NOT fit"), std::string::npos) << r3;

  SeedTerms s;
  s.scaling = "100,8,60,16";
  EXPECT_NE(seed_terms_report(s).find("83.3%"), std::string::npos);
  s.scaling = "100,8,60";
  EXPECT_THROW(seed_terms_report(s), ConfigError);
  SeedTerms p;
  p.pipeline_stages = 4;
  p.target_bubble = 3.0 / 11.0;
  EXPECT_NE(seed_terms_report(p).find("smallest m = 8"), std::string::npos) << seed_terms_report(p);
  p.target_bubble.reset();
  EXPECT_THROW(seed_terms_report(p), ConfigError);  // --pp without --target-bubble
  SeedTerms k;
  k.recompute_layers = 16;
  EXPECT_THROW(seed_terms_report(k), ConfigError);  // without --activation-unit
  k.activation_unit = GiB;
  EXPECT_NE(seed_terms_report(k).find("best k = 4"), std::string::npos);
  EXPECT_THROW(seed_terms_report(SeedTerms{}), ConfigError);
}
