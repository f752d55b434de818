// Tensor- and sequence-parallel configs: read from [parallel], composed with
// dp in the mesh (tp innermost), and every shape that cannot be placed
// rejected when the config is read — before a rank starts — with the keys
// and the arithmetic in the message (docs/math.md (M.38): a head count is never rounded
// down).
#include <gtest/gtest.h>

#include <filesystem>

#include "meshtrain/train/equivalence.h"
#include "meshtrain/train/run.h"
#include "train/config_error.h"
#include "train/train_fixtures.h"

using namespace meshtrain;

namespace {

const char* kBase = R"(
[model]
vocab_size = 259
d_model = 96
n_layers = 2
n_heads = 12
n_kv_heads = 4
ffn_hidden = 64
max_seq_len = 64
[data]
path = "runs/data"
seq_len = 64
)";

std::string error_of(const std::vector<std::string>& overrides) {
  return meshtrain::testing::config_error(kBase, overrides);
}

}  // namespace

TEST(TensorParallelConfig, ReadsTpAndSequenceParallelism) {
  const auto c = train::parse_config(kBase, {"parallel.tp=4", "parallel.sequence_parallel=true", "parallel.dp=2"});
  EXPECT_EQ(c.parallel.tp, 4);
  EXPECT_TRUE(c.parallel.sequence_parallel);
  // tp is the innermost axis: ranks 0-3 are one tensor-parallel group.
  const comm::MeshShape m = train::mesh_for(c, 8);
  EXPECT_EQ(m.tp, 4);
  EXPECT_EQ(m.dp, 2);
  EXPECT_EQ(m.coords(3)[comm::Axis::Tp], 3);
  EXPECT_EQ(m.coords(4)[comm::Axis::Dp], 1);
  auto from_world = c;
  from_world.parallel.dp = 0;  // mpirun: dp = world / tp
  EXPECT_EQ(train::mesh_for(from_world, 12).dp, 3);
  EXPECT_THROW(train::mesh_for(from_world, 6), ConfigError);  // 6 ranks do not hold tp = 4 groups
  EXPECT_THROW(train::mesh_for(c, 4), ConfigError);           // tp 4 x dp 2 needs 8 ranks
}

TEST(TensorParallelConfig, ShapesThatCannotBePlacedAreRejectedWithTheArithmetic) {
  // Query heads not dividing.
  auto e = error_of({"parallel.tp=5"});
  EXPECT_NE(e.find("model.n_heads = 12 does not split over parallel.tp = 5 (12 % 5 = 2)"), std::string::npos) << e;
  // KV heads neither dividing nor divided by tp: 4 KV heads over 6 ranks.
  e = error_of({"parallel.tp=6"});
  EXPECT_NE(e.find("model.n_kv_heads = 4 and parallel.tp = 6: neither divides the other (4 % 6 = 4, 6 % 4 = 2)"),
            std::string::npos)
      << e;
  // KV heads fewer than ranks but dividing them: shared, accepted.
  EXPECT_EQ(error_of({"parallel.tp=12"}), "");
  EXPECT_EQ(error_of({"parallel.tp=2"}), "");
  // A hidden size with fewer columns than ranks.
  e = error_of({"parallel.tp=12", "model.ffn_hidden=8"});
  EXPECT_NE(e.find("gate_proj.weight: 8 granules of 1 cannot be split over 12 ranks (8 < 12)"), std::string::npos) << e;
  // Sequence parallelism with a sequence that does not split.
  e = error_of({"parallel.tp=4", "parallel.sequence_parallel=true", "data.seq_len=62"});
  EXPECT_NE(e.find("data.seq_len = 62 does not split (62 % 4 = 2)"), std::string::npos) << e;
  EXPECT_EQ(error_of({"parallel.tp=4", "parallel.sequence_parallel=false", "data.seq_len=62"}), "");
  EXPECT_NE(error_of({"parallel.tp=0"}).find("parallel.tp = 0: expected >= 1"), std::string::npos);
}

TEST(TensorParallelConfig, VerifyRefusesABadLayoutBeforeAnyRankRuns) {
  auto cfg = meshtrain::testing::tiny_train_config();  // 2 heads, 1 KV head
  const auto ds = meshtrain::testing::varied_documents(8, 1);
  cfg.metrics.run_dir = (std::filesystem::temp_directory_path() / "mt-tp-bad-layout").string();
  std::filesystem::remove_all(cfg.metrics.run_dir);
  try {
    train::compare_with_single_rank(cfg, train::parse_layout("tp=4,dp=2"), 1, ds, 1e-4);
    FAIL() << "4 tensor-parallel ranks cannot hold 2 query heads";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_heads = 2 does not split over parallel.tp = 4"), std::string::npos)
        << e.what();
  }
  auto sixteen = cfg;  // one KV head's 8 features cannot form 16 canonical blocks
  sixteen.training.reproducible_blocks = 16;
  EXPECT_THROW(train::compare_with_single_rank(sixteen, train::parse_layout("tp=2"), 1, ds, 0, /*bitwise=*/true),
               ConfigError);
  cfg.data.seq_len = 15;
  cfg.model.max_seq_len = 16;
  EXPECT_THROW(train::compare_with_single_rank(cfg, train::parse_layout("tp=2,sp=on"), 1, ds, 1e-4), ConfigError);
  EXPECT_FALSE(std::filesystem::exists(cfg.metrics.run_dir));
}
