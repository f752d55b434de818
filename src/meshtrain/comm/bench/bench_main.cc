// Standalone `bench comm` (same code as `meshtrain bench comm`).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "meshtrain/comm/bench/comm_bench.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "comm") args.erase(args.begin());
  try {
    return meshtrain::comm::bench::run_from_args(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench comm: error: %s\n", e.what());
    return 1;
  }
}
