#include "meshtrain/app/data.h"

#include <filesystem>
#include <fstream>
#include <memory>

#include "meshtrain/app/progress.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/threading.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"
#include "meshtrain/data/stats.h"
#include "meshtrain/data/tokenizer_train.h"

namespace meshtrain::app {
namespace fs = std::filesystem;

PrepareSummary prepare_data(const PrepareRequest& q) {
  data::PrepareOptions o;
  o.inputs = q.inputs;
  o.out_dir = q.out;
  o.format = data::parse_input_format(q.format);
  o.val_fraction = q.val_fraction;
  o.seed = q.seed;
  o.overwrite = q.overwrite;
  if (q.progress) o.progress = stderr_progress("data prepare", "bytes");
  std::unique_ptr<data::Tokenizer> tok = std::make_unique<data::ByteTokenizer>();
  if (!q.tokenizer.empty()) tok = data::SentencePieceTokenizer::from_file(q.tokenizer);
  const data::PrepareResult r = data::prepare_dataset(o, *tok);
  PrepareSummary s;
  s.out_dir = r.out_dir;
  s.tokenizer = data::tokenizer_summary(tok->describe()).dump();
  s.source_files = r.source_files;
  s.documents = r.documents;
  s.train_documents = r.train_documents;
  s.val_documents = r.val_documents;
  s.train_tokens = r.train_tokens;
  s.val_tokens = r.val_tokens;
  s.seconds = r.seconds;
  return s;
}

namespace {

std::string show_id(const data::Tokenizer& tok, int32_t id) {
  if (id == tok.bos_id()) return "<bos>";
  if (id == tok.eos_id()) return "<eos>";
  if (id == tok.pad_id()) return "<pad>";
  const std::string s = tok.decode(std::span<const int32_t>(&id, 1));
  if (s == " ") return "' '";
  if (s == "\n") return "'\\n'";
  if (s == "\t") return "'\\t'";
  bool printable = !s.empty() && s.size() <= 12;
  for (unsigned char c : s) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable) return "'" + s + "'";
  return std::string("#").append(std::to_string(id));
}

}  // namespace

std::string inspect_data(const std::string& dir) {
  std::string out;
  char buf[512];
  for (const char* split : {"train", "val"}) {
    const data::TokenDataset ds = data::TokenDataset::open(dir, split);
    const data::TokenStats s = data::compute_token_stats(ds);
    std::snprintf(buf, sizeof buf,
                  "%s: %lld documents, %lld tokens (%lld targets), document length min %lld / mean %.1f / max %lld\n",
                  split, (long long)s.documents, (long long)s.tokens, (long long)s.targets,
                  (long long)s.min_doc_length, s.mean_doc_length, (long long)s.max_doc_length);
    out += buf;
    std::snprintf(buf, sizeof buf, "  %lld distinct ids of %lld; top:", (long long)s.distinct_ids,
                  (long long)ds.tokenizer().vocab_size());
    out += buf;
    for (const auto& [id, count] : s.top(10)) {
      std::snprintf(buf, sizeof buf, " %s %.1f%%", show_id(ds.tokenizer(), id).c_str(),
                    s.targets ? 100.0 * double(count) / double(s.targets) : 0.0);
      out += buf;
    }
    std::snprintf(buf, sizeof buf, "\n  unigram entropy %.4f nats/token%s\n", s.unigram_entropy_nats,
                  std::string(split) == "val" ? " (baseline for the validation loss)" : "");
    out += buf;
    if (std::string(split) == "val")
      out += "  tokenizer " + data::tokenizer_summary(ds.tokenizer().describe()).dump() + "\n";
  }
  return out;
}

TokenizerTrainSummary train_tokenizer(const TokenizerTrainRequest& q) {
  MT_REQUIRE(ConfigError, q.overwrite || !fs::exists(q.out), "tokenizer train: ", q.out,
             " already exists (remove it or pass --overwrite)");
  data::TokenizerTrainOptions o;
  o.inputs = q.inputs;
  o.format = data::parse_input_format(q.format);
  o.vocab_size = q.vocab;
  o.model_type = q.type;
  o.threads = hardware_cores();
  const data::TokenizerTrainResult r = data::train_sentencepiece(o);
  // Written beside and renamed: an existing model is replaced whole or kept.
  const fs::path out(q.out);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  const std::string tmp = q.out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(r.model_bytes.data(), std::streamsize(r.model_bytes.size()));
    f.close();
    MT_REQUIRE(DataError, f.good(), "cannot write ", tmp);
  }
  fs::rename(tmp, q.out);
  TokenizerTrainSummary s;
  s.out = q.out;
  s.documents = r.documents;
  s.bytes = r.bytes;
  s.vocab = r.vocab_size;
  s.seconds = r.seconds;
  // Compression on the training text: a quick sanity figure.
  const auto tok = data::SentencePieceTokenizer::from_model(r.model_bytes);
  int64_t tokens = 0, bytes = 0;
  for (const auto& src : data::expand_inputs(q.inputs, o.format))
    data::for_each_document(src, [&](std::string_view doc) {
      if (bytes > (int64_t(8) << 20)) return;  // a sample is enough
      tokens += int64_t(tok->encode(doc).size());
      bytes += int64_t(doc.size());
    });
  s.bytes_per_token = tokens ? double(bytes) / double(tokens) : 0.0;
  return s;
}

}  // namespace meshtrain::app
