// The 8-rank cells that compose every axis (train_fixtures.h
// all_axes_config: dp2 x tp2 x pp2 with ZeRO-3, cp2 x tp2 x dp2) on the MPI
// backend, one rank per process: every process records the single-rank
// reference in-process (threads backend, one rank), then trains the cell
// across the MPI world and compares each step per tensor (gradients,
// update deltas and parameters, equivalence.h) under fp64 (1e-10) and
// fp32 (its default, 5e-4: they reach 1e-4 per tensor); in reproducible
// mode bitwise.
//   mpirun -np 8 --oversubscribe --allow-run-as-root train_equivalence_mpi_test
#include <gtest/gtest.h>

#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/core/threading.h"
#include "train/mpi_test_main.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

TEST(EquivalenceMpi, EightRankCellsMatchOneRankPerTensorInFp64AndFp32) {
  auto world = comm::mpi_world();
  ASSERT_EQ(world->size(), 8) << "the cells need 8 processes";
  const auto ds = varied_documents(96, 5);
  set_compute_threads(1);
  for (const char* layout : kAllAxesCells) {
    SCOPED_TRACE(layout);
    const auto cfg = train::with_layout(all_axes_config(), train::parse_layout(layout));
    for (auto& r : expect_mpi_matches_one_rank(world, cfg, 2, ds, train::default_tolerance("fp32"))) {
      r.layout = layout;
      if (world->rank() == 0) std::fputs(r.str().c_str(), stdout);
    }
  }
}

// Reproducible mode across processes: both cells with sequence parallelism
// and the tied table, bitwise (zero difference in f32) against one rank
// (docs/math.md (M.73), (M.74), "Tied lanes").
TEST(EquivalenceMpi, ReproducibleModeIsBitwiseAcrossEveryAxis) {
  auto world = comm::mpi_world();
  ASSERT_EQ(world->size(), 8) << "the cells need 8 processes";
  const auto ds = varied_documents(96, 5);
  set_compute_threads(1);
  auto base = all_axes_config();
  base.model.n_kv_heads = 2;  // whole KV heads per tp rank
  for (const char* layout : {"dp=2,tp=2,sp=on,pp=2,zero=3", "cp=2,tp=2,sp=on,dp=2"}) {
    SCOPED_TRACE(layout);
    expect_mpi_bitwise_one_rank(world, train::with_layout(base, train::parse_layout(layout)), 2, ds);
  }
}

int main(int argc, char** argv) { return run_mpi_tests(argc, argv); }
