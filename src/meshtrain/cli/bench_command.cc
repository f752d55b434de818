// `meshtrain bench comm ...`: thin wrapper over comm/bench.
// `meshtrain bench machine [--out FILE] [--ranks N] [--max-bytes B]`: this
// machine's profile for the planner (plan/machine_bench.h).
#include <cstdio>
#include <fstream>
#include <string>

#include "meshtrain/cli/commands.h"
#include "meshtrain/comm/bench/comm_bench.h"
#include "meshtrain/core/error.h"
#include "meshtrain/plan/byte_size.h"
#include "meshtrain/plan/machine_bench.h"

namespace meshtrain::cli {

namespace {

int bench_machine(const Args& args) {
  const char* usage = "usage: meshtrain bench machine [--out FILE.toml] [--ranks N] [--max-bytes 64MiB]";
  plan::MachineBenchOptions o;
  std::string out;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    MT_REQUIRE(ConfigError, i + 1 < args.size(), a, " needs a value (", usage, ")");
    const std::string& v = args[++i];
    if (a == "--out") out = v;
    else if (a == "--ranks") o.ranks = std::stoi(v);
    else if (a == "--max-bytes") o.max_bytes = size_t(plan::parse_bytes(v, a));
    else MT_THROW(ConfigError, "unknown option '", a, "' (", usage, ")");
  }
  const std::string toml = plan::bench_machine(o);
  if (out.empty()) {
    std::fputs(toml.c_str(), stdout);
    return 0;
  }
  const std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << toml;
    MT_REQUIRE(ConfigError, f.good(), "--out ", out, ": cannot write ", tmp);
  }
  MT_REQUIRE(ConfigError, std::rename(tmp.c_str(), out.c_str()) == 0, "--out ", out, ": cannot replace the file");
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

int cmd_bench(const Args& args) {
  if (!args.empty() && args[0] == "machine") return bench_machine(args);
  MT_REQUIRE(ConfigError, !args.empty() && args[0] == "comm",
             "usage: meshtrain bench comm [--backend threads|mpi] [--ranks N] [--min-bytes 4K] [--max-bytes 256M] "
             "[--iters N] [--ops all_reduce,...] | meshtrain bench machine [--out FILE.toml]");
  return comm::bench::run_from_args(Args(args.begin() + 1, args.end()));
}

}  // namespace meshtrain::cli
