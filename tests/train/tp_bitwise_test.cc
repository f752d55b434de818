// Reproducible mode across tensor and sequence parallelism (docs/math.md
// (M.73)): every sum over a dimension tp splits runs as the same canonical
// blocks in one tree on every layout, one rank included, so `verify
// --bitwise` holds with zero difference: the loss, every gradient, update
// and parameter identical after each of 3 AdamW steps.
//   Llama (RMSNorm, RoPE, SwiGLU, untied) and GPT-2 (LayerNorm, learned
//   positions, GELU, biases, tied) x tp 2 and 4, sp off and on, composed
//   with dp, ZeRO 3 and pipeline stages; bf16; the refusals.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/train/equivalence.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

// 4 heads of 4 (d_model 16), every KV head whole on each of up to 4 ranks;
// GPT-2's choices with the tied table.
train::TrainConfig bitwise_config(bool gpt2) { return tp_test_config(4, 4, 4, gpt2, gpt2); }

train::EquivalenceReport bitwise(const train::TrainConfig& cfg, const char* layout) {
  return train::compare_with_single_rank(cfg, train::parse_layout(layout), 3, varied_documents(64, 5), 0.0,
                                         /*bitwise=*/true);
}

}  // namespace

TEST(TensorParallelBitwise, EveryTpSpLayoutIsBitwiseOneRank) {
  for (bool gpt2 : {false, true}) {
    for (const char* text : {"tp=2", "tp=4", "tp=2,sp=on", "tp=4,sp=on", "tp=2,dp=2", "tp=2,sp=on,dp=2,zero=1"}) {
      SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2 " : "llama ") << text);
      const auto r = bitwise(bitwise_config(gpt2), text);
      EXPECT_TRUE(r.pass()) << r.str();
      EXPECT_TRUE(claims_cover(r, "tensor parallelism (tp ")) << r.str();
      if (std::string(text).find("sp=on") != std::string::npos)
        EXPECT_TRUE(claims_cover(r, "sequence parallelism")) << r.str();
    }
  }
}

// Untied, and tied (GPT-2): the table's embedding and LM-head gradients in
// two lanes, each reduced over the replicas before they are added, as the
// first and last stage do (docs/math.md, "Tied lanes").
TEST(TensorParallelBitwise, ComposedWithPipelineStagesAndZero3) {
  for (bool gpt2 : {false, true}) {
    for (const char* text : {"pp=2,tp=2", "dp=2,tp=2,pp=2,zero=3", "dp=2,tp=2,sp=on,pp=2,zero=3", "dp=2,pp=2",
                             "dp=4,zero=1"}) {
      SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2 " : "llama ") << text);
      const auto r = bitwise(bitwise_config(gpt2), text);
      EXPECT_TRUE(r.pass()) << r.str();
      if (std::string(text).find("pp=2") != std::string::npos) EXPECT_TRUE(claims_cover(r, "pipeline stages")) << r.str();
    }
  }
}

TEST(TensorParallelBitwise, Bf16IsBitwiseToo) {
  auto cfg = bitwise_config(true);
  cfg.training.precision = "bf16";
  for (const char* text : {"tp=2,sp=on", "tp=4"}) {
    SCOPED_TRACE(text);
    const auto r = bitwise(cfg, text);
    EXPECT_TRUE(r.pass()) << r.str();
  }
}

// The blocks decide the bits: another block count gives another (equally
// valid) trajectory, the same on every layout.
TEST(TensorParallelBitwise, TheBlockCountIsPartOfTheArithmetic) {
  auto cfg = bitwise_config(false);
  cfg.training.reproducible_blocks = 4;
  const auto four = bitwise(cfg, "tp=4,sp=on");
  EXPECT_TRUE(four.pass()) << four.str();
  cfg.training.reproducible = true;
  const auto ds = varied_documents(64, 5);
  train::TrainConfig eight = cfg;
  eight.training.reproducible_blocks = 8;
  const auto r = train::compare_records(single_rank_records(cfg, 1, ds, 2), single_rank_records(eight, 1, ds, 2),
                                        train::global_tensors(cfg.model), "fp32", 0.0);
  EXPECT_FALSE(r.pass()) << "4 and 8 canonical blocks summed the same way";
}

// Grouped-query attention (docs/math.md (M.76)): every layout runs the
// backward per query head and sums a KV head's query heads in one tree; a
// KV head shared by several tp ranks gathers their parts over them first.
// Groups of 2, 4 and 3 (12 heads on 4 KV heads) and 6 (12 on 2, shared
// by 2 ranks holding 3 each); biases and the tied table (GPT-2); sp, ZeRO-3,
// pipeline stages and cp composed.
TEST(TensorParallelBitwise, SharedKvHeadsAreBitwiseOneRank) {
  struct Case {
    int64_t heads, kv;
    bool gpt2;
    const char* layout;
  };
  for (const Case c : {Case{4, 1, false, "tp=2"}, Case{4, 1, false, "tp=4,sp=on"}, Case{4, 2, true, "tp=4"},
                       Case{4, 2, false, "tp=2"}, Case{12, 4, false, "tp=4"}, Case{12, 2, true, "tp=4,sp=on"},
                       Case{4, 1, true, "dp=2,tp=2,sp=on,zero=3"}, Case{4, 1, false, "dp=2,tp=2,pp=2,zero=3"},
                       Case{4, 1, false, "cp=2,tp=2"}}) {
    SCOPED_TRACE(::testing::Message() << c.heads << " heads on " << c.kv << " KV heads, "
                                      << (c.gpt2 ? "gpt2 " : "llama ") << c.layout);
    const auto r = bitwise(tp_test_config(c.heads, 8, c.kv, c.gpt2, c.gpt2), c.layout);  // KV rows >= 8 blocks
    EXPECT_TRUE(r.pass()) << r.str();
    EXPECT_TRUE(claims_cover(r, "tensor parallelism (tp ")) << r.str();
    EXPECT_EQ(claims_cover(r, "KV heads shared by"), train::parse_layout(c.layout).tp > c.kv) << r.str();
  }
}

TEST(TensorParallelBitwise, RefusesBlockCountsTpCannotSplit) {
  auto blocks = bitwise_config(false);
  blocks.training.reproducible_blocks = 2;
  expect_config_error([&] { bitwise(blocks, "tp=4"); },
                      "training.reproducible_blocks = 2 canonical blocks do not split over parallel.tp = 4 ranks "
                      "(2 % 4 = 2)");
  blocks.training.reproducible_blocks = 6;
  expect_config_error([&] { bitwise(blocks, "tp=2"); }, "training.reproducible_blocks = 6: expected a power of two");
}

// A reproducible run saved at tp = 2 with sequence parallelism and resumed
// at tp = 4 ends with the bits of the uninterrupted one-rank run, and the
// resume says so (restore_claim.h).
TEST(TensorParallelBitwise, ResumedAtAnotherTpContinuesTheSameBits) {
  expect_resume_continues_the_same_bits(bitwise_config(true), varied_documents(64, 5), "tp=2,sp=on", "tp=4,sp=on");
}
