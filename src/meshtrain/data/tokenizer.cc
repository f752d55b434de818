#include "meshtrain/data/tokenizer.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/data/digest.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"

namespace meshtrain::data {

std::vector<int32_t> Tokenizer::encode_document(std::string_view text) const {
  std::vector<int32_t> body = encode(text);
  std::vector<int32_t> out;
  out.reserve(body.size() + 2);
  out.push_back(bos_id());
  out.insert(out.end(), body.begin(), body.end());
  out.push_back(eos_id());
  return out;
}

void Tokenizer::encode_document_to(std::string_view text, const IdSink& sink) const {
  const int32_t bos = bos_id(), eos = eos_id();
  sink({&bos, 1});
  sink(encode(text));
  sink({&eos, 1});
}

void ByteTokenizer::encode_document_to(std::string_view text, const IdSink& sink) const {
  std::vector<int32_t> block;
  block.reserve(std::min<size_t>(text.size() + 2, size_t(1) << 16));
  block.push_back(kBos);
  for (size_t i = 0; i < text.size(); ++i) {
    block.push_back(int32_t(static_cast<unsigned char>(text[i])));
    if (block.size() == block.capacity()) {
      sink(block);
      block.clear();
    }
  }
  block.push_back(kEos);
  sink(block);
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = int32_t(static_cast<unsigned char>(text[i]));
  return out;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    MT_REQUIRE(DataError, id >= 0 && id < kVocab, "byte tokenizer: id ", id, " at position ", i,
               " is outside the vocabulary [0, ", kVocab, ")");
    if (id < 256) out.push_back(char(static_cast<unsigned char>(id)));
  }
  return out;
}

nlohmann::json ByteTokenizer::describe() const {
  return {{"type", "byte"}, {"vocab_size", kVocab}, {"bos_id", kBos}, {"eos_id", kEos}, {"pad_id", kPad}};
}

std::unique_ptr<Tokenizer> make_tokenizer(const nlohmann::json& d) {
  MT_REQUIRE(DataError, d.is_object() && d.contains("type") && d["type"].is_string(),
             "tokenizer description has no \"type\": ", d.dump());
  const std::string type = d["type"].get<std::string>();
  if (type == "byte") {
    auto tok = std::make_unique<ByteTokenizer>();
    // A description that disagrees with the built-in ids would decode wrongly.
    MT_REQUIRE(DataError, d == tok->describe(), "byte tokenizer description ", d.dump(),
               " does not match this build's ", tok->describe().dump());
    return tok;
  }
  if (type == "sentencepiece") {
    MT_REQUIRE(DataError, d.contains("model_base64") && d["model_base64"].is_string(),
               "sentencepiece tokenizer description has no \"model_base64\"");
    auto tok = SentencePieceTokenizer::from_model(base64_decode(d["model_base64"].get<std::string>()),
                                                  "the embedded sentencepiece model");
    // The recorded digest and ids must be those of the embedded model.
    nlohmann::json want = tok->describe();
    for (const char* key : {"sha256", "vocab_size", "bos_id", "eos_id", "pad_id"})
      MT_REQUIRE(DataError, d.contains(key) && d[key] == want[key], "sentencepiece tokenizer description: \"", key,
                 "\" is ", d.contains(key) ? d[key].dump() : std::string("missing"), " but the embedded model has ",
                 want[key].dump());
    return tok;
  }
  MT_THROW(DataError, "unknown tokenizer type '", type, "' (known: byte, sentencepiece)");
}

nlohmann::json tokenizer_summary(const nlohmann::json& description) {
  nlohmann::json s = description;
  if (s.is_object()) s.erase("model_base64");
  return s;
}

}  // namespace meshtrain::data
