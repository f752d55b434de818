// meshtrain: one binary for training, data preparation and benchmarks.
#include <cstdio>
#include <exception>
#include <string>

#include "meshtrain/cli/commands.h"

namespace {

void usage() {
  std::fputs(
      "usage: meshtrain <command> [args]\n"
      "  train CONFIG.toml [--set section.key=value ...]   train a model\n"
      "  data prepare --out DIR INPUT...                   text/JSONL/fortune files -> token shards\n"
      "  bench comm [--backend threads|mpi] [--ranks N]    collective bandwidth and latency\n"
      "  verify CONFIG.toml --layout dp=4,zero=3 --steps K compare a layout with the single-rank run\n"
      "  plan CONFIG.toml [--layout dp=2,tp=2,pp=2,...] [--hardware FILE] [--json] [--devices D]\n"
      "                                                    placements, predicted memory, communication, step time\n"
      "  plan --params N --precision bf16 --layout dp=8,zero=3 [--activations B ...]  the seed's formulas\n"
      "  scale CONFIG.toml --layouts dp=1 dp=2 [--steps K] [--weak]   scaling series: tokens/s, efficiency, SVG\n"
      "  bench machine [--out FILE.toml]                   this machine's profile for plan --hardware\n"
      "  ckpt inspect|verify|export|import ...              distributed checkpoints, safetensors\n"
      "  generate --from DIR|model.safetensors --prompt S   sample text from a trained model\n"
      "  --version\n",
      stderr);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meshtrain::cli;
  if (argc < 2) {
    usage();
    return 2;
  }
  const std::string cmd = argv[1];
  Args rest(argv + 2, argv + argc);
  try {
    if (cmd == "--version" || cmd == "version") {
      std::printf("%s\n", version_string().c_str());
      return 0;
    }
    if (cmd == "train") return cmd_train(rest);
    if (cmd == "data") return cmd_data(rest);
    if (cmd == "bench") return cmd_bench(rest);
    if (cmd == "ckpt") return cmd_ckpt(rest);
    if (cmd == "generate") return cmd_generate(rest);
    if (cmd == "verify") return cmd_verify(rest);
    if (cmd == "plan") return cmd_plan(rest);
    if (cmd == "scale") return cmd_scale(rest);
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      usage();
      return 0;
    }
    std::fprintf(stderr, "meshtrain: unknown command '%s'\n", cmd.c_str());
    usage();
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
