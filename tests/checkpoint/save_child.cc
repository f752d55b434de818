// Saves steps FIRST .. FIRST+COUNT-1 of the deterministic crash_state as two
// ranks (threads backend), keeping the last 2. The crash tests run it as a
// child process and kill it at fault points (MESHTRAIN_FAULT=SITE#HIT:kill).
//   checkpoint_save_child ROOT FIRST COUNT [--no-exchange]
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/comm/launch.h"

using namespace meshtrain;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ROOT FIRST COUNT [--no-exchange]\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  const int64_t first = std::atoll(argv[2]), count = std::atoll(argv[3]);
  checkpoint::SaveOptions o;
  o.keep_last = 2;
  o.allow_exchange = !(argc > 4 && std::strcmp(argv[4], "--no-exchange") == 0);
  try {
    for (int64_t step = first; step < first + count; ++step) {
      const auto state = testing::crash_state(step);
      comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
        std::vector<std::vector<char>> storage;
        checkpoint::save_checkpoint(
            *ctx.world, root, testing::make_request(state, step, testing::Partition::Flat, 2, ctx.rank, storage), o);
      });
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "save failed: %s\n", e.what());
    return 3;
  }
  return 0;
}
