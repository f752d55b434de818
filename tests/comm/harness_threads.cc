#include <string>

#include "harness.h"
#include "meshtrain/comm/thread_world.h"
#include "support/run_ranks.h"

namespace meshtrain::comm::testing {

bool mpi_mode() { return false; }
int max_ranks() { return 8; }

bool for_each_rank(int n, const std::function<void(ProcessGroup&)>& fn, GroupOptions options) {
  if (options.timeout == kDefaultTimeout) options.timeout = std::chrono::seconds(30);
  auto world = ThreadWorld::create(n, options);
  meshtrain::testing::run_ranks(n, [&](int r) {
    try {
      fn(*world->group(r));
    } catch (const std::exception& e) {
      world->abort("rank " + std::to_string(r) + " failed: " + e.what());  // nobody hangs
      throw;
    }
  });
  return true;
}

}  // namespace meshtrain::comm::testing
