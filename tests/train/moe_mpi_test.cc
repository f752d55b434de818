// Mixture of experts with expert parallelism on the MPI backend (one rank
// per process): every process computes the single-rank reference in-process
// (threads backend, one rank), then trains dp = world with ep in {2, world}
// across the MPI world and compares the whole parameters after 3 AdamW
// steps (f32, tolerance 1e-4 relative to the largest parameter), dropless
// and with a capacity factor that drops tokens; in reproducible mode the
// same comparison is bitwise.
//   mpirun -np 4 --oversubscribe --allow-run-as-root train_moe_mpi_test
#include <gtest/gtest.h>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/parallel/global_values.h"
#include "support/numeric.h"
#include "train/mpi_test_main.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

train::TrainConfig model_config(double capacity) {
  auto cfg = tiny_moe_config(2, true, capacity);
  cfg.optimizer.lr = 1e-3;
  cfg.training.micro_batch = 2;
  cfg.training.grad_accum = 2;
  return cfg;
}

// Trains cfg at dp = world, the given ep and ZeRO stage across the MPI
// world for 3 steps; the whole parameters in global order.
std::vector<double> trained_across_world(train::TrainConfig cfg, const std::shared_ptr<comm::ProcessGroup>& world,
                                         int ep, int zero, const data::TokenDataset& ds) {
  const int W = world->size();
  cfg.parallel.dp = W;
  cfg.parallel.ep = ep;
  cfg.parallel.zero_stage = zero;
  comm::MeshShape shape;
  shape.dp = W;
  shape.ep = ep;
  comm::ParallelContext ctx = mpi_context(world, shape);
  train::Trainer t(cfg, ctx, ds, std::nullopt);
  for (int s = 0; s < 3; ++s) EXPECT_FALSE(t.step().skipped);
  return parallel::gather_global_values(t.engine(), ctx.group({"pp", "tp"}), false);
}

}  // namespace

TEST(MoeMpi, ExpertParallelEquivalentToSingleRank) {
  auto world = comm::mpi_world();
  const int W = world->size();
  const auto ds = varied_documents(96, 3);
  set_compute_threads(1);
  for (double capacity : {0.0, 0.75}) {
    for (int ep : {2, W}) {
      if (W % ep != 0 || 4 % ep != 0) continue;
      SCOPED_TRACE(::testing::Message() << "world " << W << ": dp=" << W << " ep=" << ep << " capacity=" << capacity);
      const auto cfg = model_config(capacity);
      const auto ref = single_rank(cfg, W, ds);
      const auto got = trained_across_world(cfg, world, ep, 0, ds);
      ASSERT_EQ(got.size(), ref.size());
      EXPECT_LT(rel_to_max(got, ref), 1e-4);
    }
  }
}

TEST(MoeMpi, ReproducibleExpertParallelismIsBitwiseOneRanks) {
  // Reproducible mode (a tree lane per source rank on each expert's owner):
  // the MPI run's parameters are the in-process single rank's, bit for bit.
  auto world = comm::mpi_world();
  const int W = world->size();
  const auto ds = varied_documents(96, 3);
  set_compute_threads(1);
  for (int ep : {2, W}) {
    if (W % ep != 0 || 4 % ep != 0) continue;
    SCOPED_TRACE(::testing::Message() << "world " << W << ": dp=" << W << " ep=" << ep);
    auto cfg = model_config(1.0);
    cfg.training.reproducible = true;
    const auto ref = single_rank(cfg, W, ds);
    EXPECT_EQ(trained_across_world(cfg, world, ep, ep == W ? 3 : 1, ds), ref);
  }
}

int main(int argc, char** argv) { return run_mpi_tests(argc, argv); }
