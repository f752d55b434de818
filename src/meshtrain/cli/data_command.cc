// meshtrain data prepare|inspect
#include <cstdio>

#include "meshtrain/app/data.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

const std::vector<std::string> kFormats = {"auto", "text", "jsonl", "fortune"};

void setup_prepare(CLI::App& data, Action& action) {
  auto* cmd = add_command(data, "prepare", "corpus files (text, JSONL, fortune) -> token shards",
                          "meshtrain data prepare --out runs/data/mine --tokenizer tok.model corpus.jsonl more.txt");
  auto q = std::make_shared<app::PrepareRequest>();
  cmd->add_option("INPUT", q->inputs, "files or directories (directories are read recursively)")->required();
  cmd->add_option("--out", q->out, "dataset directory to create (train.bin, val.bin, meta.json)")->required();
  cmd->add_option("--format", q->format, "input format")->check(CLI::IsMember(kFormats));
  cmd->add_option("--tokenizer", q->tokenizer, "SentencePiece model (meshtrain tokenizer train); default: bytes")
      ->check(CLI::ExistingFile);
  cmd->add_option("--val-fraction", q->val_fraction, "share of documents held out for validation")
      ->check(open_range(0.0, 1.0));
  cmd->add_option("--seed", q->seed, "seed of the train/validation split");
  cmd->add_flag("--overwrite", q->overwrite, "replace an existing dataset (atomically, at the end)");
  cmd->add_flag("!--no-progress", q->progress, "no progress line on stderr");
  cmd->callback([q, &action] {
    action = [q] {
      const app::PrepareSummary r = app::prepare_data(*q);
      std::printf("prepared %s from %lld file(s) in %.2f s\n", r.out_dir.c_str(), (long long)r.source_files,
                  r.seconds);
      std::printf("  documents %lld (train %lld, val %lld)\n", (long long)r.documents, (long long)r.train_documents,
                  (long long)r.val_documents);
      std::printf("  tokens    %lld (train %lld, val %lld)\n", (long long)(r.train_tokens + r.val_tokens),
                  (long long)r.train_tokens, (long long)r.val_tokens);
      std::printf("  tokenizer %s\n", r.tokenizer.c_str());
      return 0;
    };
  });
}

void setup_inspect(CLI::App& data, Action& action) {
  auto* cmd = add_command(data, "inspect", "counts, lengths, top tokens and the unigram-entropy baseline",
                          "meshtrain data inspect runs/data/fortunes");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("DIR", *dir, "a prepared dataset directory")->required();
  cmd->callback([dir, &action] {
    action = [dir] {
      std::fputs(app::inspect_data(*dir).c_str(), stdout);
      return 0;
    };
  });
}

void setup(CLI::App& root, Action& action) {
  auto* data = add_command(root, "data", "prepare and inspect token datasets", "meshtrain data inspect runs/data/fortunes");
  data->require_subcommand(1);
  setup_prepare(*data, action);
  setup_inspect(*data, action);
}

const bool registered = register_command(30, setup);

}  // namespace
}  // namespace meshtrain::cli
