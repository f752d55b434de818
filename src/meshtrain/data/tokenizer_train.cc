#include "meshtrain/data/tokenizer_train.h"

#include <sentencepiece_trainer.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "meshtrain/core/error.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"

namespace meshtrain::data {
namespace {

constexpr size_t kPieceBytes = 2048;

class Pieces final : public sentencepiece::SentenceIterator {
 public:
  explicit Pieces(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  bool done() const override { return i_ >= pieces_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return pieces_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::vector<std::string> pieces_;
  size_t i_ = 0;
};

// Cuts a document after a '\n' once a piece reaches kPieceBytes (a single
// longer line is cut where it is).
void cut_document(std::string_view doc, std::vector<std::string>* out) {
  while (!doc.empty()) {
    size_t n = doc.size();
    if (n > kPieceBytes) {
      const size_t nl = doc.rfind('\n', kPieceBytes);
      n = nl == std::string_view::npos ? kPieceBytes : nl + 1;
    }
    out->emplace_back(doc.substr(0, n));
    doc.remove_prefix(n);
  }
}

}  // namespace

TokenizerTrainResult train_sentencepiece(const TokenizerTrainOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  MT_REQUIRE(ConfigError, o.model_type == "bpe" || o.model_type == "unigram", "tokenizer type '", o.model_type,
             "' is not supported (bpe or unigram)");
  // 256 byte pieces + UNK/BOS/EOS/PAD + '\n' are always in the vocabulary.
  MT_REQUIRE(ConfigError, o.vocab_size >= 262 && o.vocab_size <= 1'000'000, "tokenizer vocabulary ", o.vocab_size,
             " must be in [262, 1000000] (256 byte pieces and 6 special pieces are always included)");
  TokenizerTrainResult r;
  std::vector<std::string> pieces;
  for (const auto& src : expand_inputs(o.inputs, o.format)) {
    r.documents += for_each_document(src, [&](std::string_view doc) {
      r.bytes += int64_t(doc.size());
      cut_document(doc, &pieces);
    });
  }
  MT_REQUIRE(DataError, r.documents > 0, "tokenizer train: no documents in the inputs");
  r.pieces = int64_t(pieces.size());

  const std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "3"},
      {"user_defined_symbols", "\n"},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9999"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"max_sentence_length", std::to_string(2 * kPieceBytes)},
      {"hard_vocab_limit", "false"},
      {"num_threads", std::to_string(std::max(1, o.threads))},
      {"minloglevel", "2"},
  };
  Pieces it(std::move(pieces));
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &r.model_bytes);
  MT_REQUIRE(DataError, status.ok(), "sentencepiece training failed: ", status.ToString());
  r.vocab_size = SentencePieceTokenizer::from_model(r.model_bytes, "the trained model")->vocab_size();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace meshtrain::data
