#include <gtest/gtest.h>

#include "harness.h"
#include "meshtrain/comm/mpi_world.h"

namespace meshtrain::comm::testing {

bool mpi_mode() { return true; }
int max_ranks() { return mpi_world()->size(); }

bool for_each_rank(int n, const std::function<void(ProcessGroup&)>& fn, GroupOptions options) {
  auto world = mpi_world();
  if (n > world->size()) return false;
  if (options.timeout == kDefaultTimeout) options.timeout = std::chrono::seconds(30);
  auto sub = world->split(world->rank() < n ? 0 : -1, world->rank(), "test", options);
  if (sub) fn(*sub);
  world->barrier();
  return true;
}

}  // namespace meshtrain::comm::testing

// Every process runs the same tests in the same order; only rank 0 prints.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = meshtrain::comm::mpi_world();
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  world->all_reduce(&failed, 1, meshtrain::DType::I32, meshtrain::comm::ReduceOp::Max);
  world.reset();
  meshtrain::comm::mpi_finalize();
  return failed;
}
