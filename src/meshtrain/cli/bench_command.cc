// `meshtrain bench comm ...`: thin wrapper over comm/bench.
#include <string>

#include "meshtrain/cli/commands.h"
#include "meshtrain/comm/bench/comm_bench.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {

int cmd_bench(const Args& args) {
  MT_REQUIRE(ConfigError, !args.empty() && args[0] == "comm",
             "usage: meshtrain bench comm [--backend threads|mpi] [--ranks N] [--min-bytes 4K] [--max-bytes 256M] "
             "[--iters N] [--ops all_reduce,...]");
  return comm::bench::run_from_args(Args(args.begin() + 1, args.end()));
}

}  // namespace meshtrain::cli
