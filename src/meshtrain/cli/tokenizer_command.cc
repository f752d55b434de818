// meshtrain tokenizer train --vocab 4096 --out tok.model FILES...
#include <cstdio>

#include "meshtrain/app/data.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* group = add_command(root, "tokenizer", "subword tokenizers (SentencePiece)",
                            "meshtrain tokenizer train --vocab 4096 --out runs/tok/tokenizer.model corpus.txt");
  group->require_subcommand(1);
  auto* cmd = add_command(*group, "train", "train a SentencePiece BPE or unigram model on corpus files",
                          "meshtrain tokenizer train --vocab 4096 --type unigram --out runs/tok/tokenizer.model "
                          "/usr/share/games/fortunes");
  auto q = std::make_shared<app::TokenizerTrainRequest>();
  cmd->add_option("INPUT", q->inputs, "files or directories, read like `data prepare` reads them")->required();
  cmd->add_option("--out", q->out, "the model file to write (tokenizer.model)")->required();
  cmd->add_option("--vocab", q->vocab, "vocabulary size, including 256 byte pieces and the special tokens")
      ->check(CLI::Range(int64_t(262), int64_t(1000000)));
  cmd->add_option("--type", q->type, "model type")->check(CLI::IsMember({"bpe", "unigram"}));
  cmd->add_option("--format", q->format, "input format")->check(CLI::IsMember({"auto", "text", "jsonl", "fortune"}));
  cmd->add_flag("--overwrite", q->overwrite, "replace an existing model file");
  cmd->callback([q, &action] {
    action = [q] {
      const app::TokenizerTrainSummary s = app::train_tokenizer(*q);
      std::printf("trained %s tokenizer %s: vocabulary %lld from %lld documents (%lld bytes) in %.2f s, "
                  "%.2f bytes/token on the training text\n",
                  q->type.c_str(), s.out.c_str(), (long long)s.vocab, (long long)s.documents, (long long)s.bytes,
                  s.seconds, s.bytes_per_token);
      if (s.vocab < q->vocab)
        std::printf("note: the corpus supports only %lld pieces of the %lld asked for\n", (long long)s.vocab,
                    (long long)q->vocab);
      return 0;
    };
  });
}

const bool registered = register_command(35, setup);

}  // namespace
}  // namespace meshtrain::cli
