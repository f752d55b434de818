#include "meshtrain/parallel/shard_plan.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/parallel_config.h"

using namespace meshtrain;

namespace {
std::shared_ptr<const model::ModelSpec> tiny_spec() {
  model::ModelConfig c;
  c.vocab_size = 300;
  c.d_model = 24;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 40;
  c.max_seq_len = 16;
  c.finalize();
  return std::make_shared<const model::ModelSpec>(model::build_model_spec(c));
}
}  // namespace

TEST(ShardPlan, PaddingAndOwnershipCoverEveryElementOnce) {
  const auto spec_ptr = tiny_spec();
  const model::ModelSpec& spec = *spec_ptr;
  for (int R : {1, 2, 3, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      std::vector<std::vector<int>> owners(spec.params.size());
      for (size_t i = 0; i < spec.params.size(); ++i) owners[i].assign(size_t(spec.params[i].numel()), 0);
      for (int r = 0; r < R; ++r) {
        parallel::ShardPlan plan(spec_ptr, R, r, stage);
        for (int u = 0; u < plan.num_units(); ++u) {
          const auto& s = plan.unit(u);
          EXPECT_EQ(s.padded % (int64_t(R) * parallel::kNormBlock), 0);
          EXPECT_GE(s.padded, s.numel);
          EXPECT_EQ(s.shard * R, s.padded);
          // The checkpoint range is the shard under every stage.
          EXPECT_EQ(plan.save_range(u).first, r * s.shard);
          for (const auto& p : plan.pieces_in(u, plan.save_range(u).first, plan.save_range(u).second))
            for (int64_t e = p.param_begin; e < p.param_end; ++e) owners[size_t(p.param)][size_t(e)]++;
          const auto [pb, pe] = plan.param_range(u);
          const auto held = stage == 3 ? std::pair(s.owned_begin, s.owned_end) : std::pair(int64_t(0), s.numel);
          EXPECT_EQ(std::pair(pb, pe), held);
          if (stage == 0) EXPECT_EQ(plan.owned_numel(u), s.padded);
          else EXPECT_EQ(plan.owned_numel(u), s.shard);
        }
      }
      for (const auto& o : owners)
        for (int n : o) ASSERT_EQ(n, 1) << "R=" << R << " stage=" << stage;
    }
  }
}

TEST(ShardPlan, PersistentBytesFollowTheFormulas) {
  const auto spec = tiny_spec();
  const int R = 4;
  auto bytes = [&](int stage) { return parallel::ShardPlan(spec, R, 1, stage).persistent_bytes(PrecisionPolicy::uniform(DType::F32)); };
  const int64_t full = parallel::ShardPlan(spec, R, 0, 0).padded_total() * 4;
  EXPECT_EQ(bytes(0).total(), full + full + 2 * full);              // docs/math.md (M.26), stage 0
  EXPECT_EQ(bytes(1).total(), full + full + 2 * full / R);          // docs/math.md (M.26), stage 1
  EXPECT_EQ(bytes(2).total(), full + (full + 2 * full) / R);        // docs/math.md (M.26), stage 2
  EXPECT_EQ(bytes(3).total(), (full + full + 2 * full) / R);        // docs/math.md (M.26), stage 3
}

TEST(ParallelConfig, Validation) {
  parallel::ParallelConfig c;
  c.zero_stage = 4;
  EXPECT_THROW(c.validate(), ConfigError);
  parallel::ParallelConfig d;
  d.dp = -1;  // 0 means "the world size" (mpirun)
  EXPECT_THROW(d.validate(), ConfigError);
}

// Bytes per parameter under each precision policy, unsharded: fp32 16
// (4 + 4 + 8), bf16 with f32 masters 18 (2 + 4 + 4 + 8); stage 3 divides
// everything by R.
TEST(ShardPlan, PersistentBytesPerPolicy) {
  const auto spec = tiny_spec();
  const int R = 4;
  const int64_t n = parallel::ShardPlan(spec, R, 0, 0).padded_total();
  const auto fp32 = PrecisionPolicy::uniform(DType::F32), bf16 = PrecisionPolicy::mixed(DType::BF16);
  EXPECT_EQ(parallel::ShardPlan(spec, R, 0, 0).persistent_bytes(fp32).total(), 16 * n);
  EXPECT_EQ(parallel::ShardPlan(spec, R, 0, 0).persistent_bytes(bf16).total(), 18 * n);
  EXPECT_EQ(parallel::ShardPlan(spec, R, 0, 1).persistent_bytes(bf16).total(), 6 * n + 12 * n / R);  // (M.26), stage 1
  EXPECT_EQ(parallel::ShardPlan(spec, R, 0, 2).persistent_bytes(bf16).total(), 2 * n + 16 * n / R);  // (M.26), stage 2
  EXPECT_EQ(parallel::ShardPlan(spec, R, 0, 3).persistent_bytes(bf16).total(), 18 * n / R);          // (M.26), stage 3
}
