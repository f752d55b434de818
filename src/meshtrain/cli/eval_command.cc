// meshtrain eval --from CHECKPOINT|model.safetensors (--data DIR [--split val] | --text FILE)
#include <cstdio>

#include "meshtrain/app/eval.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "eval", "loss, nats/token and bits/byte of a trained model on held-out data",
                          "meshtrain eval --from runs/demo/checkpoints --data runs/data/fortunes --split validation");
  auto q = std::make_shared<app::EvalRequest>();
  cmd->add_option("--from", q->from, "checkpoint directory or model.safetensors")->required();
  auto* data = cmd->add_option("--data", q->data, "a prepared dataset directory (data prepare)");
  auto* text = cmd->add_option("--text", q->text, "a text, JSONL or fortune file, tokenized with the model's tokenizer")
                   ->check(CLI::ExistingPath);
  data->excludes(text);
  cmd->add_option("--split", q->split, "split of --data")->check(CLI::IsMember({"val", "validation", "train"}));
  cmd->add_option("--format", q->format, "format of --text")->check(CLI::IsMember({"auto", "text", "jsonl", "fortune"}));
  cmd->add_option("--seq-len", q->seq_len, "positions per row; 0: what the checkpoint trained with")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  cmd->add_option("--mode", q->mode, "packed or padded rows; default: what the checkpoint trained with")
      ->check(CLI::IsMember({"packed", "padded"}));
  cmd->add_option("--precision", q->precision, "fp32, bf16 or fp16; default: the checkpoint's policy")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--batch", q->batch, "rows per forward pass; 0: the checkpoint's micro_batch")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  cmd->add_option("--rows", q->rows, "rows to evaluate (train's training.eval_rows); 0: all")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->callback([q, &action] {
    if (q->data.empty() && q->text.empty()) throw CLI::RequiredError("--data DIR or --text FILE");
    action = [q] {
      const app::EvalReport r = app::evaluate(*q);
      std::printf("model   %s (%s)\ndata    %s (seq_len %lld, %s, %lld rows per batch)\n", r.source.c_str(),
                  r.precision.c_str(), r.data.c_str(), (long long)r.seq_len, r.mode.c_str(), (long long)r.batch);
      std::printf("loss sum %.6f nats over %lld supervised tokens (%lld bytes of text)\n", r.loss_sum,
                  (long long)r.supervised, (long long)r.target_bytes);
      std::printf("loss %.4f nats/token | %.4f bits/byte\n", r.nats_per_token, r.bits_per_byte);
      return 0;
    };
  });
}

const bool registered = register_command(60, setup);

}  // namespace
}  // namespace meshtrain::cli
