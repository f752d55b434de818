// main() of a test binary run under mpirun: every process runs the tests,
// rank 0 prints them, and the exit code is the worst of all processes.
#pragma once

#include <gtest/gtest.h>

#include "meshtrain/comm/mpi_world.h"

namespace meshtrain::testing {

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
