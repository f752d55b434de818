// SentencePiece tokenizer: training (bpe and unigram), exact round trips,
// the self-contained description, and bits per byte for both tokenizers.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "data_test_util.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/bits_per_byte.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/digest.h"
#include "meshtrain/data/loader.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"
#include "meshtrain/data/tokenizer_train.h"

namespace meshtrain::data {
namespace {

using testing::ScratchDir;
using testing::write_text;

std::string corpus() {
  std::string c;
  const char* words[] = {"the", "model", "trains", "on", "a", "mesh", "of", "devices", "and", "every", "layout",
                         "computes", "same", "update", "tokens", "gradient"};
  for (int d = 0; d < 120; ++d) {
    std::string doc;
    for (int w = 0; w < 12; ++w) doc += std::string(words[(d * 7 + w * 3) % 16]) + (w % 5 == 4 ? ",\n  " : " ");
    c += doc + std::to_string(d) + ".\n%\n";
  }
  return c;
}

std::unique_ptr<SentencePieceTokenizer> train(const ScratchDir& dir, const std::string& type, int64_t vocab) {
  write_text(dir / "corpus", corpus());
  TokenizerTrainOptions o;
  o.inputs = {dir / "corpus"};
  o.vocab_size = vocab;
  o.model_type = type;
  const TokenizerTrainResult r = train_sentencepiece(o);
  EXPECT_EQ(r.documents, 120);
  EXPECT_LE(r.vocab_size, vocab);
  return SentencePieceTokenizer::from_model(r.model_bytes);
}

TEST(SentencePiece, BpeAndUnigramRoundTripExactly) {
  ScratchDir dir;
  for (const char* type : {"bpe", "unigram"}) {
    const auto tok = train(dir, type, 400);
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    EXPECT_EQ(tok->pad_id(), 3);
    // Whitespace runs, newlines, tabs, leading spaces and characters never
    // seen in training (byte fallback) come back byte for byte.
    for (const std::string text : {"the model trains", "  leading and  double  spaces\n\tnext line\n\n",
                                   "unseen: \xc3\xbc\xc3\xb1\xc3\xaf \xf0\x9f\x98\x80 Q#~", " the"}) {
      const auto ids = tok->encode(text);
      EXPECT_EQ(tok->decode(ids), text) << type;
      int64_t bytes = 0;
      for (int32_t id : ids) bytes += tok->token_bytes(id);
      EXPECT_EQ(bytes, int64_t(text.size())) << type << ": token_bytes must add up to the text's bytes";
    }
    // Subwords: frequent words take fewer tokens than bytes.
    EXPECT_LT(tok->encode("the model trains on a mesh of devices").size(), 20u) << type;
  }
}

TEST(SentencePiece, DescriptionIsSelfContainedAndChecked) {
  ScratchDir dir;
  const auto tok = train(dir, "bpe", 320);
  const nlohmann::json d = tok->describe();
  EXPECT_EQ(d["type"], "sentencepiece");
  EXPECT_EQ(d["sha256"], sha256_hex(tok->model_bytes()));
  const auto back = make_tokenizer(d);
  EXPECT_EQ(back->describe(), d);
  EXPECT_EQ(back->encode("every layout"), tok->encode("every layout"));
  EXPECT_FALSE(tokenizer_summary(d).contains("model_base64"));

  nlohmann::json bad = d;
  bad["sha256"] = std::string(64, '0');
  EXPECT_THROW(make_tokenizer(bad), DataError);
  bad = d;
  bad["eos_id"] = 7;
  EXPECT_THROW(make_tokenizer(bad), DataError);
  bad = d;
  bad["model_base64"] = base64_encode("not a model");
  EXPECT_THROW(make_tokenizer(bad), DataError);
  EXPECT_THROW(SentencePieceTokenizer::from_model("junk", "junk.model"), DataError);
}

TEST(SentencePiece, TrainRejectsBadOptions) {
  ScratchDir dir;
  write_text(dir / "c.txt", "text");
  TokenizerTrainOptions o;
  o.inputs = {dir / "c.txt"};
  o.model_type = "wordpiece";
  EXPECT_THROW(train_sentencepiece(o), ConfigError);
  o.model_type = "bpe";
  o.vocab_size = 100;
  EXPECT_THROW(train_sentencepiece(o), ConfigError);
  o.vocab_size = 300;
  o.inputs = {dir / "missing.txt"};
  EXPECT_THROW(train_sentencepiece(o), DataError);
}

TEST(Base64, RoundTripsEveryLength) {
  std::string s;
  for (int n = 0; n < 20; ++n) {
    EXPECT_EQ(base64_decode(base64_encode(s)), s) << n;
    s.push_back(char(n * 37));
  }
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_THROW(base64_decode("abc"), DataError);
}

// Bits per byte = loss sum / ln 2 / bytes behind the supervised targets.
TEST(BitsPerByte, CountsTheBytesBehindTargetsForBothTokenizers) {
  ScratchDir dir;
  const std::string text = "every layout computes the same update";
  const auto sp = train(dir, "bpe", 400);
  const ByteTokenizer byte;
  for (const Tokenizer* tok : {static_cast<const Tokenizer*>(&byte), static_cast<const Tokenizer*>(sp.get())}) {
    std::vector<std::vector<int32_t>> docs = {tok->encode_document(text), tok->encode_document(text)};
    const auto ds = TokenDataset::from_documents(
        docs, tok == &byte ? std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>())
                           : make_tokenizer(sp->describe()));
    ValidationIterator it(ds, BatchMode::Padded, 64);
    Batch b;
    ASSERT_TRUE(it.next(2, &b));
    // Every document's tokens after BOS are targets (its EOS has no bytes).
    EXPECT_EQ(supervised_bytes(b, ds.tokenizer()), int64_t(2 * text.size()));
    EXPECT_EQ(b.supervised_targets, int64_t(2 * (docs[0].size() - 1)));
  }
  EXPECT_DOUBLE_EQ(bits_per_byte(std::numbers::ln2 * 10, 5), 2.0);
  EXPECT_EQ(bits_per_byte(3.0, 0), 0.0);
}

}  // namespace
}  // namespace meshtrain::data
