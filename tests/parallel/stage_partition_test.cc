// Stage partitioning by the cost model (stage_partition.h): equal blocks
// split evenly, a heavy LM head takes blocks off the last stage, the
// largest chunk's FLOPs is the smallest possible (checked against every
// split), the table names every stage; and the configuration checks of
// pipeline_config.h reject what cannot run before anything does.
#include "meshtrain/parallel/stage_partition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/pipeline_config.h"
#include "meshtrain/parallel/schedule_gen.h"

using namespace meshtrain;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

namespace {

std::vector<parallel::SegmentCost> costs(double embed, std::vector<double> blocks, double head) {
  std::vector<parallel::SegmentCost> c{{"embedding", embed, 0, 0}};
  for (size_t i = 0; i < blocks.size(); ++i) c.push_back({"block " + std::to_string(i), blocks[i], 0, 0});
  c.push_back({"head", head, 0, 0});
  return c;
}

double largest_chunk(const std::vector<parallel::SegmentCost>& c, const std::vector<int64_t>& blocks) {
  double worst = 0;
  size_t s = 1;
  for (size_t k = 0; k < blocks.size(); ++k) {
    double f = k == 0 ? c.front().flops : 0;
    for (int64_t b = 0; b < blocks[k]; ++b) f += c[s++].flops;
    if (k + 1 == blocks.size()) f += c.back().flops;
    worst = std::max(worst, f);
  }
  return worst;
}

model::ModelConfig eight_layers() {
  model::ModelConfig m;
  m.vocab_size = 259;
  m.d_model = 32;
  m.n_layers = 8;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.max_seq_len = 16;
  m.finalize();
  return m;
}

}  // namespace

TEST(StagePartition, BalancesChunkFlopsWithEmbeddingAndHead) {
  EXPECT_EQ(parallel::balance_blocks(costs(0, std::vector<double>(8, 1.0), 0), 4), (std::vector<int64_t>{2, 2, 2, 2}));
  // A head worth two blocks: the last stage keeps fewer blocks.
  const auto heavy = costs(0.1, std::vector<double>(8, 1.0), 2.0);
  const auto b = parallel::balance_blocks(heavy, 2);
  EXPECT_EQ(b, (std::vector<int64_t>{5, 3}));
  // Optimal against every split of 8 blocks into 3 chunks.
  const auto uneven = costs(0.5, {3, 1, 4, 1, 5, 9, 2, 6}, 4);
  const auto got = parallel::balance_blocks(uneven, 3);
  EXPECT_EQ(std::accumulate(got.begin(), got.end(), int64_t(0)), 8);
  double best = 1e300;
  for (int64_t a = 1; a <= 6; ++a)
    for (int64_t c = 1; a + c <= 7; ++c) best = std::min(best, largest_chunk(uneven, {a, c, 8 - a - c}));
  EXPECT_DOUBLE_EQ(largest_chunk(uneven, got), best);
  EXPECT_THAT([&] { parallel::balance_blocks(heavy, 9); },
              ThrowsMessage<ConfigError>(HasSubstr("every chunk needs at least one block")));
}

TEST(StagePartition, TheModelsHeadWeighsOnTheLastStage) {
  model::ModelConfig m = eight_layers();
  m.vocab_size = 4096;  // an LM head worth several blocks
  const auto c = parallel::segment_costs(m, 2, 16, false, DType::F32);
  ASSERT_EQ(c.size(), 10u);
  EXPECT_GT(c.back().flops, 2 * c[1].flops);
  EXPECT_GT(c.back().activation_bytes, c[1].activation_bytes);  // dlogits are vocabulary-wide
  EXPECT_EQ(c[1].flops, c[8].flops);                            // blocks are alike
  const auto recompute = parallel::segment_costs(m, 2, 16, true, DType::F32);
  EXPECT_GT(recompute[1].flops, c[1].flops);                         // one more forward
  EXPECT_EQ(recompute[1].activation_bytes, 2 * 16 * m.d_model * 4);  // only the block input
  const auto blocks = parallel::balance_blocks(c, 2);
  EXPECT_GT(blocks[0], blocks[1]);
  const std::string table = parallel::partition_table(c, parallel::pipeline_chunks(8, 2, 1, blocks),
                                                      parallel::make_schedule("1f1b", 2, 4), DType::F32, "cost model");
  EXPECT_NE(table.find("stage 0: [embedding .. block " + std::to_string(blocks[0] - 1) + "]"), std::string::npos)
      << table;
  EXPECT_NE(table.find("stage 1: [block " + std::to_string(blocks[0]) + " .. head]"), std::string::npos) << table;
  EXPECT_NE(table.find("(100% of the slowest)"), std::string::npos) << table;
  EXPECT_NE(table.find("2 live"), std::string::npos) << table;  // 1F1B: p micro-batches on the first stage
}

TEST(StagePartition, PipelineConfigsThatCannotRunAreRejectedBeforeAnything) {
  const model::ModelConfig m = eight_layers();
  parallel::ParallelConfig p;
  p.pp = 9;
  EXPECT_THAT([&] { parallel::check_pipeline(p, m, 4); },
              ThrowsMessage<ConfigError>(HasSubstr("9 pipeline chunks but model.n_layers = 8")));
  p.pp = 2;
  p.schedule = "interleaved";
  p.virtual_stages = 3;
  EXPECT_THAT(
      [&] { parallel::check_pipeline(p, m, 4); },
      ThrowsMessage<ConfigError>(HasSubstr("parallel.virtual_stages = 3 does not divide the 8 / 2 blocks of a stage")));
  p.pp_layers = {2, 1, 1, 2, 1, 1};  // explicit: uneven chunks are the user's choice
  EXPECT_NO_THROW(parallel::check_pipeline(p, m, 4));
  p.pp_layers = {2, 2};
  EXPECT_THAT([&] { parallel::check_pipeline(p, m, 4); },
              ThrowsMessage<ConfigError>(HasSubstr("parallel.pp_layers has 2 entries")));
  p = {};
  p.pp = 2;
  p.schedule = "zb-v";
  EXPECT_THAT([&] { parallel::check_pipeline(p, m, 4); },
              ThrowsMessage<ConfigError>(HasSubstr("parallel.virtual_stages = 2")));
  p.schedule = "1f1b";
  EXPECT_THAT([&] { parallel::check_pipeline(p, m, 0); }, ThrowsMessage<ConfigError>(HasSubstr("micro-batches = 0")));
  // The chunk placement follows the schedule; blocks from the cost model.
  parallel::LayoutOptions o;
  p.schedule = "zb-v";
  p.virtual_stages = 2;
  parallel::set_pipeline_options(o, p, m, {});
  EXPECT_EQ(o.placement, parallel::ChunkPlacement::V);
  EXPECT_EQ(o.pp_layers, (std::vector<int64_t>{2, 2, 2, 2}));
  const auto chunks = parallel::pipeline_chunks(8, 2, 2, o.pp_layers, o.placement);
  EXPECT_EQ(chunks[0].pp_rank, 0);
  EXPECT_EQ(chunks[3].pp_rank, 0);  // the last chunk (with the head) back on rank 0
  EXPECT_EQ(chunks[3].last, 9);
}

TEST(StagePartition, MixtureOfExpertsBlocksArePricedByTheExpertsATokenRuns) {
  model::ModelConfig m = eight_layers();
  m.n_experts = 8;
  m.experts_top_k = 2;
  m.moe_layers = {1, 3, 5, 7};
  const auto c = parallel::segment_costs(m, 2, 16, false, DType::F32);
  model::ModelConfig dense = eight_layers();
  const auto d = parallel::segment_costs(dense, 2, 16, false, DType::F32);
  EXPECT_EQ(c[1].flops, d[1].flops);  // block 0 is dense
  // Block 1: two experts' feed-forwards per token and the router in place
  // of one feed-forward; its parameters are all eight experts'.
  const double ffn = 2.0 * 32 * 3 * double(m.d_model * m.ffn_hidden), router = 2.0 * 32 * double(m.d_model * 8);
  EXPECT_DOUBLE_EQ(c[2].flops - d[2].flops, 3 * (ffn + router));
  EXPECT_GT(c[2].activation_bytes, d[2].activation_bytes);
  EXPECT_GT(c[2].params, 7 * d[2].params / 2);
  m.moe_shared_expert = true;
  EXPECT_DOUBLE_EQ(parallel::segment_costs(m, 2, 16, false, DType::F32)[2].flops - c[2].flops, 3 * ffn);
}
