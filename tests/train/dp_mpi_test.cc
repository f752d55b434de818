// The data-parallel equivalence tests on the MPI backend: every process
// computes the single-rank reference in-process (threads backend, one
// rank), then trains the layout across the MPI world and compares.
//   mpirun -np 2 --oversubscribe --allow-run-as-root train_dp_mpi_test
#include <gtest/gtest.h>

#include <numeric>

#include "meshtrain/comm/hierarchical_group.h"
#include "support/numeric.h"
#include "train/mpi_test_main.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {


train::TrainConfig layout(int R, int G, int stage, parallel::GradReduce reduce) {
  auto cfg = tiny_train_config();
  cfg.optimizer.lr = 1e-3;
  cfg.parallel.dp = R;
  cfg.parallel.zero_stage = stage;
  cfg.parallel.grad_reduce = reduce;
  cfg.parallel.bucket_mb = 0.01;
  cfg.training.grad_accum = G;
  cfg.training.micro_batch = 1;
  return cfg;
}

std::vector<double> run_single_rank(const train::TrainConfig& cfg, const data::TokenDataset& ds) {
  std::vector<double> p;
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    for (int s = 0; s < 3; ++s) t.step();
    p = gathered(t);
  });
  return p;
}

// A pure data-parallel context over the whole MPI world; `hosts` names each
// rank's node (empty: one host).
comm::ParallelContext dp_context(const std::shared_ptr<comm::ProcessGroup>& world,
                                 std::vector<std::string> hosts = {}) {
  comm::ParallelContext ctx;
  ctx.rank = world->rank();
  ctx.world_size = world->size();
  ctx.world = world;
  ctx.host_of_rank = std::move(hosts);
  comm::MeshShape shape;
  shape.dp = world->size();
  ctx.mesh = comm::Mesh::create(shape, world);
  ctx.allocator = CachingAllocator::create();
  return ctx;
}

}  // namespace

TEST(DataParallelMpi, EquivalentToSingleRank) {
  auto world = comm::mpi_world();
  const int R = world->size();
  const auto ds = varied_documents(96, 3);
  for (int G : {1, 2}) {
    const auto ref = run_single_rank(layout(1, R * G, 0, parallel::GradReduce::Sum), ds);
    for (int stage : {0, 1, 2, 3}) {
      for (auto reduce : {parallel::GradReduce::Sum, parallel::GradReduce::Avg}) {
        SCOPED_TRACE(::testing::Message() << "R=" << R << " G=" << G << " stage=" << stage);
        comm::ParallelContext ctx = dp_context(world);
        train::Trainer t(layout(R, G, stage, reduce), ctx, ds, std::nullopt);
        for (int s = 0; s < 3; ++s) EXPECT_FALSE(t.step().skipped);
        EXPECT_LT(max_abs_diff(gathered(t), ref), 1e-6);
      }
    }
  }
}

// Reproducible mode across processes: the tree reduction over MPI point-to-
// point messages gives the bits one in-process rank gets over R x G leaves.
TEST(DataParallelMpi, ReproducibleModeIsBitwiseAcrossTheSplit) {
  auto world = comm::mpi_world();
  const int R = world->size();
  const auto ds = varied_documents(96, 3);
  auto cfg = [&](int dp, int G, int stage) {
    auto c = layout(dp, G, stage, parallel::GradReduce::Sum);
    c.training.reproducible = true;
    return c;
  };
  const auto ref = run_single_rank(cfg(1, 2 * R, 0), ds);
  for (int stage : {0, 3}) {
    SCOPED_TRACE(::testing::Message() << "R=" << R << " stage=" << stage);
    comm::ParallelContext ctx = dp_context(world);
    train::Trainer t(cfg(R, 2, stage), ctx, ds, std::nullopt);
    for (int s = 0; s < 3; ++s) t.step();
    EXPECT_EQ(gathered(t), ref);
  }
}

// Uneven micro-batch counts per replica (parallel.replica_grad_accum,
// docs/math.md (M.75)) across processes: bitwise against one rank over the
// whole window in reproducible mode (the span tree over MPI point-to-point
// messages), and within rounding by default, under ZeRO 0 and 2.
//   np 2: 3 + 1;  np 4: 3 + 3 + 1 + 1 and 1 + 2 + 3 + 2
TEST(DataParallelMpi, UnevenCountsPerReplica) {
  auto world = comm::mpi_world();
  const int R = world->size();
  const auto ds = varied_documents(96, 3);
  const std::vector<std::vector<int64_t>> splits =
      R == 2 ? std::vector<std::vector<int64_t>>{{3, 1}} : std::vector<std::vector<int64_t>>{{3, 3, 1, 1}, {1, 2, 3, 2}};
  for (const auto& counts : splits) {
    for (bool reproducible : {true, false}) {
      auto one = layout(1, int(std::accumulate(counts.begin(), counts.end(), int64_t(0))), 0, parallel::GradReduce::Sum);
      one.training.reproducible = reproducible;
      const auto ref = run_single_rank(one, ds);
      for (int stage : {0, 2}) {
        SCOPED_TRACE(::testing::Message() << "counts " << ::testing::PrintToString(counts) << " stage=" << stage
                                          << (reproducible ? " reproducible" : ""));
        auto cfg = layout(R, 1, stage, parallel::GradReduce::Sum);
        cfg.parallel.replica_grad_accum = counts;
        cfg.training.reproducible = reproducible;
        comm::ParallelContext ctx = dp_context(world);
        train::Trainer t(cfg, ctx, ds, std::nullopt);
        for (int s = 0; s < 3; ++s) EXPECT_FALSE(t.step().skipped);
        if (reproducible) EXPECT_EQ(gathered(t), ref);
        else EXPECT_LT(max_abs_diff(gathered(t), ref), 1e-6);
      }
    }
  }
}

// The same across two "nodes" of two processes each with the hierarchical
// data-parallel collectives (train/hierarchy.h): the tree split at the node
// boundary is the same tree, over the sub-groups' point-to-point messages
// on the groups' worker threads (stage 0), and ZeRO-3's reduce-scatters and
// gathers in two levels.
TEST(DataParallelMpi, HierarchicalAcrossTwoNodesIsBitwiseInReproducibleMode) {
  auto world = comm::mpi_world();
  const int R = world->size();
  if (R != 4) GTEST_SKIP() << "two nodes of two ranks need 4 processes";
  const auto ds = varied_documents(96, 3);
  auto cfg = [&](int dp, int G, int stage) {
    auto c = layout(dp, G, stage, parallel::GradReduce::Sum);
    c.training.reproducible = true;
    c.comm.hierarchical = "on";
    return c;
  };
  const auto ref = run_single_rank(cfg(1, 2 * R, 0), ds);
  for (int stage : {0, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage=" << stage);
    comm::ParallelContext ctx = dp_context(world, {"node0", "node0", "node1", "node1"});
    train::Trainer t(cfg(R, 2, stage), ctx, ds, std::nullopt);
    for (int s = 0; s < 3; ++s) t.step();
    EXPECT_EQ(gathered(t), ref);
    auto* h = comm::as_hierarchical(t.training_step().data_group());
    ASSERT_NE(h, nullptr);
    EXPECT_GT(h->inter().stats().total().calls, 0u);
  }
}

int main(int argc, char** argv) { return run_mpi_tests(argc, argv); }
