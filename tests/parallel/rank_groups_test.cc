// Covers src/meshtrain/parallel/rank_groups.cc: the groups a rank's step
// uses, resolved once from its layout plan on a mesh (here the recording
// mesh of one rank of a larger world). Each group spans the plan's axes;
// axes of one rank are null where a part must know it has no peers, while
// the data and model groups always exist (a group of one reduces nothing).
#include "meshtrain/parallel/rank_groups.h"

#include <gtest/gtest.h>

#include "meshtrain/comm/recording/recording_context.h"
#include "meshtrain/parallel/layout_plan.h"

using namespace meshtrain;

namespace {

model::ModelConfig model_config(bool tied) {
  model::ModelConfig c;
  c.vocab_size = 40;
  c.d_model = 16;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.ffn_hidden = 24;
  c.max_seq_len = 8;
  c.tied_embeddings = tied;
  c.finalize();
  return c;
}

parallel::RankGroups groups_of(const model::ModelConfig& cfg, const comm::MeshShape& shape, int rank,
                               comm::ParallelContext& ctx) {
  ctx = comm::recording_context(shape, rank, 1);
  const parallel::LayoutPlan plan(cfg, shape, rank, parallel::LayoutOptions{});
  return parallel::resolve_groups(plan, ctx.mesh);
}

TEST(RankGroups, OneRankHasItsDataAndModelGroupsAndNoPeers) {
  comm::ParallelContext ctx;
  const parallel::RankGroups g = groups_of(model_config(false), comm::MeshShape{}, 0, ctx);
  ASSERT_NE(g.data, nullptr);
  ASSERT_NE(g.model, nullptr);
  ASSERT_NE(g.dp, nullptr);
  EXPECT_EQ(g.data->size(), 1);
  EXPECT_EQ(g.model->size(), 1);
  EXPECT_EQ(g.tp, nullptr);
  EXPECT_EQ(g.pp, nullptr);
  EXPECT_EQ(g.cp, nullptr);
  EXPECT_EQ(g.ep, nullptr);
  EXPECT_EQ(g.tie, nullptr);
}

TEST(RankGroups, EachGroupSpansThePlansAxes) {
  const comm::MeshShape shape{2, 2, 1, 2};  // pp 2 x dp 2 x tp 2
  for (int rank : {0, 5, 7}) {
    SCOPED_TRACE(rank);
    comm::ParallelContext ctx;
    const parallel::RankGroups g = groups_of(model_config(true), shape, rank, ctx);
    ASSERT_TRUE(g.tp && g.pp && g.dp && g.data && g.model && g.world);
    EXPECT_EQ(g.tp->size(), 2);
    EXPECT_EQ(g.pp->size(), 2);
    EXPECT_EQ(g.dp->size(), 2);
    EXPECT_EQ(g.data->size(), 2);   // dp x cp
    EXPECT_EQ(g.model->size(), 4);  // pp x tp
    EXPECT_EQ(g.world->size(), 8);
    EXPECT_EQ(g.cp, nullptr);
    // A tied model on two stages: both hold a copy of the embedding.
    ASSERT_NE(g.tie, nullptr);
    EXPECT_EQ(g.tie->size(), 2);
  }
}

TEST(RankGroups, AnUntiedModelHasNoTieGroupAndSharedKvHeadsHaveTheirs) {
  comm::ParallelContext ctx;
  const parallel::RankGroups untied = groups_of(model_config(false), comm::MeshShape{2, 1, 1, 1}, 1, ctx);
  EXPECT_EQ(untied.tie, nullptr);
  // 2 KV heads on 4 tp ranks: each is shared by 2 consecutive ranks.
  comm::ParallelContext ctx4;
  const parallel::RankGroups tp4 = groups_of(model_config(false), comm::MeshShape{1, 1, 1, 4}, 3, ctx4);
  ASSERT_NE(tp4.kv_share, nullptr);
  EXPECT_EQ(tp4.kv_share->size(), 2);
  EXPECT_EQ(tp4.kv_share->rank(), 1);
}

}  // namespace
