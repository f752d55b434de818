// `meshtrain data prepare|inspect`: corpus -> token shards, and a summary of
// a prepared dataset (counts, histogram, unigram-entropy baseline).
#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/data/stats.h"

namespace meshtrain::cli {
namespace {

constexpr const char* kUsage =
    "usage: meshtrain data prepare --out DIR [--format auto|text|jsonl|fortune] [--val-fraction F]\n"
    "                              [--seed S] [--overwrite] INPUT...\n"
    "       meshtrain data inspect DIR";

[[noreturn]] void usage_error(const std::string& what) { MT_THROW(ConfigError, "data: ", what, "\n", kUsage); }

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end) usage_error(flag + " expects a number, got '" + text + "'");
  return v;
}

// Splits "--flag=value" or takes the value from the next argument.
std::string flag_value(const Args& args, size_t& i, const std::string& flag) {
  const std::string& a = args[i];
  if (a.size() > flag.size() && a[flag.size()] == '=') return a.substr(flag.size() + 1);
  if (i + 1 >= args.size()) usage_error(flag + " needs a value");
  return args[++i];
}

bool is_flag(const std::string& a, const std::string& flag) {
  return a == flag || (a.size() > flag.size() && a.compare(0, flag.size(), flag) == 0 && a[flag.size()] == '=');
}

int cmd_prepare(const Args& args) {
  data::PrepareOptions opts;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (is_flag(a, "--out")) {
      opts.out_dir = flag_value(args, i, "--out");
    } else if (is_flag(a, "--format")) {
      opts.format = data::parse_input_format(flag_value(args, i, "--format"));
    } else if (is_flag(a, "--val-fraction")) {
      opts.val_fraction = parse_number<double>("--val-fraction", flag_value(args, i, "--val-fraction"));
    } else if (is_flag(a, "--seed")) {
      opts.seed = parse_number<uint64_t>("--seed", flag_value(args, i, "--seed"));
    } else if (a == "--overwrite") {
      opts.overwrite = true;
    } else if (a == "--") {
      opts.inputs.insert(opts.inputs.end(), args.begin() + long(i) + 1, args.end());
      break;
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error("unknown flag '" + a + "'");
    } else {
      opts.inputs.push_back(a);
    }
  }
  if (opts.out_dir.empty()) usage_error("prepare needs --out DIR");
  if (opts.inputs.empty()) usage_error("prepare needs at least one INPUT file or directory");
  const data::PrepareResult r = data::prepare_dataset(opts);
  std::printf("prepared %s from %lld file(s) in %.2f s\n", r.out_dir.c_str(), (long long)r.source_files, r.seconds);
  std::printf("  documents %lld (train %lld, val %lld)\n", (long long)r.documents, (long long)r.train_documents,
              (long long)r.val_documents);
  std::printf("  tokens    %lld (train %lld, val %lld)\n", (long long)(r.train_tokens + r.val_tokens),
              (long long)r.train_tokens, (long long)r.val_tokens);
  return 0;
}

std::string show_id(const data::Tokenizer& tok, int32_t id) {
  if (id == tok.bos_id()) return "<bos>";
  if (id == tok.eos_id()) return "<eos>";
  if (id == tok.pad_id()) return "<pad>";
  const std::string s = tok.decode(std::span<const int32_t>(&id, 1));
  if (s == " ") return "' '";
  if (s == "\n") return "'\\n'";
  if (s == "\t") return "'\\t'";
  if (s.size() == 1 && (unsigned char)s[0] >= 0x21 && (unsigned char)s[0] < 0x7f) return "'" + s + "'";
  return "#" + std::to_string(id);
}

int cmd_inspect(const Args& args) {
  if (args.size() != 2) usage_error("inspect takes exactly one DIR");
  if (args[1].size() > 1 && args[1][0] == '-') usage_error("unknown flag '" + args[1] + "'");
  const std::string dir = args[1];
  for (const char* split : {"train", "val"}) {
    const data::TokenDataset ds = data::TokenDataset::open(dir, split);
    const data::TokenStats s = data::compute_token_stats(ds);
    std::printf("%s: %lld documents, %lld tokens (%lld targets), document length min %lld / mean %.1f / max %lld\n",
                split, (long long)s.documents, (long long)s.tokens, (long long)s.targets, (long long)s.min_doc_length,
                s.mean_doc_length, (long long)s.max_doc_length);
    std::printf("  %lld distinct ids of %lld; top:", (long long)s.distinct_ids,
                (long long)ds.tokenizer().vocab_size());
    for (const auto& [id, count] : s.top(10))
      std::printf(" %s %.1f%%", show_id(ds.tokenizer(), id).c_str(),
                  s.targets ? 100.0 * double(count) / double(s.targets) : 0.0);
    std::printf("\n  unigram entropy %.4f nats/token%s\n", s.unigram_entropy_nats,
                std::string(split) == "val" ? " (baseline for the validation loss)" : "");
  }
  return 0;
}

}  // namespace

int cmd_data(const Args& args) {
  if (args.empty()) usage_error("missing subcommand");
  if (args[0] == "prepare") return cmd_prepare(args);
  if (args[0] == "inspect") return cmd_inspect(args);
  if (args[0] == "--help" || args[0] == "-h") {
    std::puts(kUsage);
    return 0;
  }
  usage_error("unknown subcommand '" + args[0] + "'");
}

}  // namespace meshtrain::cli
