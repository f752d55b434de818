// The data-parallel equivalence tests on the MPI backend: every process
// computes the single-rank reference in-process (threads backend, one
// rank), then trains the layout across the MPI world and compares.
//   mpirun -np 2 --oversubscribe --allow-run-as-root train_dp_mpi_test
#include <gtest/gtest.h>

#include "meshtrain/comm/mpi_world.h"
#include "support/numeric.h"
#include "train/mpi_main.h"
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
        comm::ParallelContext ctx;
        ctx.rank = world->rank();
        ctx.world_size = R;
        ctx.world = world;
        comm::MeshShape shape;
        shape.dp = R;
        ctx.mesh = comm::Mesh::create(shape, world);
        ctx.allocator = CachingAllocator::create();
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
    comm::ParallelContext ctx;
    ctx.rank = world->rank();
    ctx.world_size = R;
    ctx.world = world;
    comm::MeshShape shape;
    shape.dp = R;
    ctx.mesh = comm::Mesh::create(shape, world);
    ctx.allocator = CachingAllocator::create();
    train::Trainer t(cfg(R, 2, stage), ctx, ds, std::nullopt);
    for (int s = 0; s < 3; ++s) t.step();
    EXPECT_EQ(gathered(t), ref);
  }
}

int main(int argc, char** argv) { return run_mpi_tests(argc, argv); }
