// Context parallelism (alone and composed with data and tensor
// parallelism) on the MPI backend, one rank per process: every process
// computes the single-rank reference in-process (threads backend, one
// rank), then trains the layout across the MPI world and compares every
// step per tensor (gradients, update deltas, parameters; equivalence.h) for
// 3 AdamW steps under fp64 (tolerance 1e-10) and f32 (1e-5, updates 0.1),
// packed rows with documents across chunk boundaries.
//   mpirun -np 2 (cp=2) | -np 4 (cp=4; cp=2 x dp=2, ZeRO 1; cp=2 x tp=2)
// Reproducible mode: bitwise against one rank.
#include <gtest/gtest.h>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/threading.h"
#include "train/mpi_test_main.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

TEST(ContextParallelMpi, EquivalentToSingleRank) {
  auto world = comm::mpi_world();
  const int W = world->size();
  const auto ds = mixed_length_documents(60);
  set_compute_threads(1);
  struct Case {
    int cp, dp, tp, zero;
  };
  int ran = 0;
  for (const Case c : {Case{W, 1, 1, 0}, Case{2, W / 2, 1, 1}, Case{2, 1, W / 2, 0}}) {
    if (c.cp * c.dp * c.tp != W || (ran > 0 && c.cp == W)) continue;
    SCOPED_TRACE(::testing::Message() << "world " << W << ": cp=" << c.cp << " dp=" << c.dp << " tp=" << c.tp
                                      << " zero=" << c.zero);
    auto cfg = context_parallel_config();
    cfg.parallel.cp = c.cp;
    cfg.parallel.dp = c.dp;
    cfg.parallel.tp = c.tp;
    cfg.parallel.zero_stage = c.zero;
    expect_mpi_matches_one_rank(world, cfg, 3, ds, 1e-5, [](const std::vector<train::StepRecord>& records) {
      for (const auto& r : records) {
        EXPECT_FALSE(r.metrics.skipped);
        // The ring moved this rank's K/V block (cp - 1) times per layer forward.
        EXPECT_GT(r.metrics.cp.ring.forward_bytes, 0);
      }
    });
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no case fits a world of " << W;
}

// Reproducible mode across processes: cp = W (and cp = 2 x tp = 2 with
// sequence parallelism at 4 processes) bitwise equal to one rank
// (docs/math.md (M.74)): zero difference in f32 after 2 steps.
TEST(ContextParallelMpi, ReproducibleModeIsBitwiseOneRank) {
  auto world = comm::mpi_world();
  const int W = world->size();
  const auto ds = mixed_length_documents(60);
  set_compute_threads(1);
  std::vector<std::string> layouts = {"cp=" + std::to_string(W)};
  if (W == 4) layouts.push_back("cp=2,tp=2,sp=on");
  for (const std::string& layout : layouts) {
    SCOPED_TRACE(layout);
    expect_mpi_bitwise_one_rank(world, train::with_layout(context_parallel_config(), train::parse_layout(layout)), 2,
                                ds);
  }
}

int main(int argc, char** argv) { return run_mpi_tests(argc, argv); }
