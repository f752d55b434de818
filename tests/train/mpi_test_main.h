// The main of a gtest binary run under mpirun: rank 0 prints the results,
// the exit code is the worst over the world, MPI finalized at the end.
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "meshtrain/comm/mesh.h"
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/comm/parallel_context.h"
#include "meshtrain/train/equivalence.h"
#include "train/train_fixtures.h"

namespace meshtrain::testing {

// This process's context on `world` (one rank per process) for `shape`.
inline comm::ParallelContext mpi_context(const std::shared_ptr<comm::ProcessGroup>& world,
                                         const comm::MeshShape& shape) {
  comm::ParallelContext ctx;
  ctx.rank = world->rank();
  ctx.world_size = world->size();
  ctx.world = world;
  ctx.mesh = comm::Mesh::create(shape, world);
  ctx.allocator = CachingAllocator::create();
  return ctx;
}

// cfg's layout trained across `world` (one rank per process) for `steps`,
// each step compared per tensor (equivalence.h) with one rank on the same
// global batch run in-process, in both runs of in_fp64_and_own. `check`
// sees each run's records (its step metrics). Returns the reports.
inline std::vector<train::EquivalenceReport> expect_mpi_matches_one_rank(
    const std::shared_ptr<comm::ProcessGroup>& world, const train::TrainConfig& cfg, int steps,
    const data::TokenDataset& ds, double tolerance,
    const std::function<void(const std::vector<train::StepRecord>&)>& check = {}) {
  std::vector<train::EquivalenceReport> reports;
  for (const auto& [c, tol] : in_fp64_and_own(cfg, tolerance)) {
    SCOPED_TRACE(c.training.precision);
    const auto ref = single_rank_records(c, c.parallel.dp, ds, steps);
    comm::ParallelContext ctx = mpi_context(world, train::mesh_for(c, world->size()));
    train::Trainer t(c, ctx, ds, std::nullopt);
    const auto got = train::record_steps(t, steps);
    auto r = train::compare_records(ref, got, train::global_tensors(c.model), c.training.precision, tol);
    EXPECT_TRUE(r.pass()) << r.str();
    if (check) check(got);
    reports.push_back(std::move(r));
  }
  return reports;
}

// Reproducible mode: cfg's layout across `world` bitwise equal to one rank
// (zero difference in f32 after `steps` steps).
inline void expect_mpi_bitwise_one_rank(const std::shared_ptr<comm::ProcessGroup>& world, train::TrainConfig cfg,
                                        int steps, const data::TokenDataset& ds) {
  cfg.training.reproducible = true;
  const auto ref = single_rank_records(cfg, cfg.parallel.dp, ds, steps);
  comm::ParallelContext ctx = mpi_context(world, train::mesh_for(cfg, world->size()));
  train::Trainer t(cfg, ctx, ds, std::nullopt);
  const auto r =
      train::compare_records(ref, train::record_steps(t, steps), train::global_tensors(cfg.model), "fp32", 0.0);
  EXPECT_TRUE(r.pass()) << r.str();
}

inline int run_mpi_tests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = comm::mpi_world();
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  world->all_reduce(&failed, 1, DType::I32, comm::ReduceOp::Max);
  world.reset();
  comm::mpi_finalize();
  return failed;
}

}  // namespace meshtrain::testing
