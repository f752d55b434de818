// The main of a gtest binary run under mpirun: rank 0 prints the results,
// the exit code is the worst over the world, MPI finalized at the end.
#pragma once

#include <gtest/gtest.h>

#include "meshtrain/comm/mesh.h"
#include "meshtrain/comm/mpi_world.h"
#include "meshtrain/comm/parallel_context.h"
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
