// Covers src/meshtrain/train/cp_config.cc (config errors).
// Context-parallel configs: parallel.cp read from [parallel], placed in the
// mesh between dp and tp, and rows that cannot be cut into 2 cp chunks
// rejected when the config is read, with the keys and the arithmetic; the
// layout plan sums gradients and shards ZeRO state over dp x cp.
#include <gtest/gtest.h>

#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/run.h"
#include "train/config_error.h"

using namespace meshtrain;

namespace {

const char* kBase = R"(
[model]
vocab_size = 259
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
max_seq_len = 128
[data]
path = "runs/data"
seq_len = 96
)";

std::string error_of(const std::vector<std::string>& overrides) {
  return meshtrain::testing::config_error(kBase, overrides);
}

}  // namespace

TEST(ContextParallelConfig, ReadsCpAndPlacesItInTheMesh) {
  const auto c = train::parse_config(kBase, {"parallel.cp=4", "parallel.dp=2"});
  EXPECT_EQ(c.parallel.cp, 4);
  const comm::MeshShape m = train::mesh_for(c, 8);
  EXPECT_EQ(m.cp, 4);
  EXPECT_EQ(m.dp, 2);
  // parallel.dp = 0 takes dp from the world size over the other axes.
  const auto auto_dp = train::parse_config(kBase, {"parallel.cp=2", "parallel.dp=0"});
  EXPECT_EQ(train::mesh_for(auto_dp, 8).dp, 4);
}

TEST(ContextParallelConfig, RowsThatDoNotCutIntoTwoCpChunksAreRejectedWithTheArithmetic) {
  // 96 = 2 x 3 x 16: cp = 3 fits, cp = 5 does not.
  EXPECT_EQ(error_of({"parallel.cp=3"}), "");
  const std::string e = error_of({"parallel.cp=5"});
  EXPECT_NE(e.find("parallel.cp = 5 cuts every row into 2 x 5 = 10 chunks"), std::string::npos) << e;
  EXPECT_NE(e.find("data.seq_len = 96 does not split (96 % 10 = 6); use a multiple of 10 such as 100"),
            std::string::npos)
      << e;
  // With sequence parallelism each rank's share splits over tp too: 2 x 2 x 4 = 16 does not divide 40.
  const std::string sp = error_of({"parallel.cp=2", "parallel.tp=4", "parallel.sequence_parallel=true",
                                   "data.seq_len=40"});
  EXPECT_NE(sp.find("needs data.seq_len to be a multiple of 2 x cp x tp = 16 (40 % 16 = 8)"), std::string::npos) << sp;
  EXPECT_NE(error_of({"parallel.cp=0"}).find("parallel.cp = 0: expected >= 1"), std::string::npos);
}

// The suggested seq_len is one the model takes: never above max_seq_len.
TEST(ContextParallelConfig, TheSuggestedSeqLenFitsTheModel) {
  // 130 positions at most: 126 % 4 = 2, and the next multiple (128) fits.
  std::string e = error_of({"model.max_seq_len=130", "data.seq_len=126", "parallel.cp=2"});
  EXPECT_NE(e.find("such as 128"), std::string::npos) << e;
  // 129 % 4 = 1 and 132 > 130: the multiple below.
  e = error_of({"model.max_seq_len=130", "data.seq_len=129", "parallel.cp=2"});
  EXPECT_NE(e.find("such as 128"), std::string::npos) << e;
  EXPECT_EQ(e.find("132"), std::string::npos) << e;
  // More chunks than positions: no seq_len can work, and cp is named.
  e = error_of({"model.max_seq_len=130", "data.seq_len=96", "parallel.cp=100000"});
  EXPECT_NE(e.find("parallel.cp = 100000 cuts every row into 2 x 100000 = 200000 chunks, more than the model's "
                   "model.max_seq_len = 130 positions: use parallel.cp <= 65"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("such as 200000"), std::string::npos) << e;
}

TEST(ContextParallelConfig, GradientsSumAndZeroShardsOverDataTimesContextAxes) {
  auto cfg = train::parse_config(kBase, {});
  comm::MeshShape mesh;
  mesh.dp = 2;
  mesh.cp = 2;
  parallel::LayoutOptions o;
  o.zero_stage = 1;
  for (int rank = 0; rank < 4; ++rank) {
    const parallel::LayoutPlan plan(cfg.model, mesh, rank, o);
    EXPECT_EQ(plan.data_axes(), comm::Axis::Dp | comm::Axis::Cp);
    EXPECT_EQ(plan.param(0).reduce_axes, comm::Axis::Dp | comm::Axis::Cp);
    // Rank = dp coordinate x cp + cp coordinate owns the same shard index in the dp x cp group.
    EXPECT_EQ(plan.shards().unit(0).owned_begin, rank * plan.shards().unit(0).shard);
    EXPECT_TRUE(plan.param(0).counts_in_norm);  // every shard owner counts its own part
  }
  EXPECT_EQ(train::parse_layout("cp=2,dp=2").mesh().world_size(), 4);  // the layout grammar takes cp
}
