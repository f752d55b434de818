// Reproducible mode across context parallelism (docs/math.md (M.74)): every
// layout, one rank included, orders a micro-batch's tokens as the same
// canonical chunk pairs, folds each query chunk's attention against its
// row's keys in order, sums every weight gradient and the loss over the
// pairs in one tree, and the cp ranks' subtrees finish that tree per
// micro-batch. So `verify --bitwise` holds with zero difference: the loss,
// every gradient, update and parameter identical after each of 3 AdamW
// steps, packed documents of mixed lengths included.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/train/equivalence.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

// Llama (GQA 4 over 2 KV heads, RoPE, SwiGLU) or GPT-2 (learned positions,
// LayerNorm, biases, the tied table); 32 positions: 16 chunks of 2.
train::TrainConfig cp_bitwise_config(bool gpt2) {
  auto cfg = tp_test_config(4, 4, 2, gpt2, gpt2);
  cfg.model.max_seq_len = 32;
  cfg.data.seq_len = 32;
  cfg.data.mode = "packed";
  return cfg;
}

train::EquivalenceReport bitwise(const train::TrainConfig& cfg, const char* layout) {
  return train::compare_with_single_rank(cfg, train::parse_layout(layout), 3, mixed_length_documents(60), 0.0,
                                         /*bitwise=*/true);
}

}  // namespace

TEST(ContextParallelBitwise, EveryCpLayoutIsBitwiseOneRank) {
  for (bool gpt2 : {false, true}) {
    for (const char* text : {"cp=2", "cp=4", "cp=8", "cp=2,dp=2,zero=1", "cp=2,tp=2", "cp=2,tp=2,sp=on"}) {
      SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2 " : "llama ") << text);
      const auto r = bitwise(cp_bitwise_config(gpt2), text);
      EXPECT_TRUE(r.pass()) << r.str();
      EXPECT_TRUE(claims_cover(r, "context parallelism (cp ")) << r.str();
    }
  }
}

TEST(ContextParallelBitwise, ComposedWithPipelineStagesAndZero3) {
  for (bool gpt2 : {false, true}) {
    for (const char* text : {"pp=2,cp=2", "dp=2,cp=2,pp=2,zero=3"}) {
      SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2 " : "llama ") << text);
      const auto r = bitwise(cp_bitwise_config(gpt2), text);
      EXPECT_TRUE(r.pass()) << r.str();
    }
  }
}

TEST(ContextParallelBitwise, Bf16IsBitwiseToo) {
  auto cfg = cp_bitwise_config(false);
  cfg.training.precision = "bf16";
  const auto r = bitwise(cfg, "cp=2,tp=2");
  EXPECT_TRUE(r.pass()) << r.str();
}

TEST(ContextParallelBitwise, RefusesWhatTheBlocksDoNotOrder) {
  auto cfg = cp_bitwise_config(false);
  cfg.training.reproducible_blocks = 2;
  expect_config_error([&] { bitwise(cfg, "cp=4"); },
                      "training.reproducible_blocks = 2 canonical token blocks do not split over parallel.cp = 4 "
                      "ranks (2 % 4 = 2)");
  expect_config_error([&] { bitwise(cfg, "cp=2,tp=2,sp=on"); },
                      "do not split over parallel.cp x parallel.tp = 2 x 2 sequence shards (2 % 4 = 2)");
  cfg.training.reproducible_blocks = 32;
  expect_config_error([&] { bitwise(cfg, "cp=2"); },
                      "2 x training.reproducible_blocks = 64 chunks (canonical token block i: chunks i and 63 - i");
}

// A reproducible run saved at cp = 2 x tp = 2 and resumed at cp = 4 ends
// with the bits of the uninterrupted one-rank run, and the resume says so.
TEST(ContextParallelBitwise, ResumedAtAnotherCpContinuesTheSameBits) {
  expect_resume_continues_the_same_bits(cp_bitwise_config(true), mixed_length_documents(60), "cp=2,tp=2", "cp=4");
}
