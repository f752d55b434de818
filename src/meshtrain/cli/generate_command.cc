// `meshtrain generate`: sample text from a checkpoint or a safetensors
// export, reproducibly for a given seed (checkpoint/generate.h).
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "meshtrain/checkpoint/generate.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/model_weights.h"
#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::cli {
namespace {

namespace ck = meshtrain::checkpoint;

constexpr const char* kUsage =
    "usage: meshtrain generate --from DIR|model.safetensors --prompt TEXT [--tokens N] [--temperature T]\n"
    "                          [--top-k K] [--seed S]\n"
    "temperature 0 is greedy decoding; the same seed gives the same text.";

[[noreturn]] void usage_error(const std::string& what) { MT_THROW(ConfigError, "generate: ", what, "\n", kUsage); }

template <typename T>
T number(const std::string& flag, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end) usage_error(flag + " expects a number, got '" + text + "'");
  return v;
}

std::unique_ptr<data::Tokenizer> tokenizer_from(const nlohmann::json* description) {
  if (description) return data::make_tokenizer(*description);
  return std::make_unique<data::ByteTokenizer>();
}

}  // namespace

int cmd_generate(const Args& args) {
  std::string from, prompt;
  bool has_prompt = false;
  ck::GenerateOptions opts;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) usage_error(a + " needs a value");
      return args[++i];
    };
    if (a == "--from") from = value();
    else if (a == "--prompt") prompt = value(), has_prompt = true;
    else if (a == "--tokens") opts.max_new_tokens = number<int64_t>(a, value());
    else if (a == "--temperature") opts.temperature = number<double>(a, value());
    else if (a == "--top-k") opts.top_k = number<int64_t>(a, value());
    else if (a == "--seed") opts.seed = number<uint64_t>(a, value());
    else usage_error("unknown argument '" + a + "'");
  }
  if (from.empty()) usage_error("needs --from");
  if (!has_prompt) usage_error("needs --prompt");
  if (opts.max_new_tokens < 0) usage_error("--tokens must be >= 0");
  if (opts.temperature < 0) usage_error("--temperature must be >= 0");

  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<data::Tokenizer> tok;
  const auto alloc = CachingAllocator::create();
  if (std::filesystem::is_regular_file(from)) {
    const auto file = ck::SafetensorsReader::open(from);
    model = std::make_unique<model::Transformer>(ck::model_config_of(file), alloc);
    ck::load_model_weights(file, *model);
    auto it = file.metadata().find("meshtrain.tokenizer");
    const nlohmann::json desc = it != file.metadata().end() ? nlohmann::json::parse(it->second) : nlohmann::json();
    tok = tokenizer_from(desc.is_null() ? nullptr : &desc);
  } else {
    const auto reader = ck::CheckpointReader::open(from);
    model = std::make_unique<model::Transformer>(ck::model_config_of(reader), alloc);
    ck::load_model_weights(reader, *model);
    const auto& meta = reader.metadata();
    tok = tokenizer_from(meta.contains(ck::kMetaTokenizer) ? &meta[ck::kMetaTokenizer] : nullptr);
  }
  MT_REQUIRE(ConfigError, tok->vocab_size() <= model->config().vocab_size, "tokenizer vocabulary ",
             tok->vocab_size(), " exceeds the model's ", model->config().vocab_size);
  std::vector<int32_t> ids = {tok->bos_id()};
  for (int32_t id : tok->encode(prompt)) ids.push_back(id);
  opts.stop_id = tok->eos_id();
  std::vector<int32_t> out = ck::generate(*model, ids, opts);
  // Ids the tokenizer does not know (a model vocabulary larger than the
  // tokenizer's) cannot be printed; drop them.
  std::erase_if(out, [&](int32_t id) { return id >= tok->vocab_size(); });
  std::printf("%s%s\n", prompt.c_str(), tok->decode(out).c_str());
  return 0;
}

}  // namespace meshtrain::cli
