// meshtrain generate --from DIR|model.safetensors --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
#include <cstdio>

#include "meshtrain/app/generate.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "generate", "sample text from a checkpoint or a safetensors export",
                          "meshtrain generate --from runs/demo/checkpoints --prompt \"The \" --temperature 0.8 "
                          "--top-p 0.9 --seed 1");
  auto q = std::make_shared<app::GenerateRequest>();
  cmd->add_option("--from", q->from, "checkpoint directory or model.safetensors")->required();
  cmd->add_option("--prompt", q->prompt, "text to continue")->required();
  cmd->add_option("--tokens", q->tokens, "new tokens to sample at most (stops at end of text)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  cmd->add_option("--temperature", q->temperature, "0 is greedy decoding")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", q->top_k, "sample among the k most likely tokens; 0: all")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--top-p", q->top_p,
                  "sample among the fewest most likely tokens whose probabilities sum to at least P; 1: all")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
            return v > 0 && v <= 1 ? std::string() : "value " + text + " is not in (0, 1]";
          },
          "NUMBER in (0, 1]"));
  cmd->add_option("--seed", q->seed, "the same seed gives the same text");
  cmd->callback([q, &action] {
    action = [q] {
      std::printf("%s\n", app::generate(*q).c_str());
      return 0;
    };
  });
}

const bool registered = register_command(50, setup);

}  // namespace
}  // namespace meshtrain::cli
