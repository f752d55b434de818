// Tokenizers map text to token ids and back. The interface is what the data
// pipeline and checkpoints need; ByteTokenizer is the built-in model (the
// demo's default), SentencePieceTokenizer (sentencepiece_tokenizer.h) the
// subword one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshtrain::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text -> ids, without special tokens.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids -> text; special tokens (BOS/EOS/PAD) are dropped. An id outside
  // the vocabulary is a DataError.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t pad_id() const = 0;
  // Bytes of text the id stands for (0 for BOS/EOS/PAD): the denominator of
  // bits per byte, which compares models with different tokenizers.
  virtual int64_t token_bytes(int32_t id) const = 0;
  // Self-contained description stored in meta.json and checkpoints;
  // make_tokenizer() rebuilds the tokenizer from it.
  virtual nlohmann::json describe() const = 0;

  // BOS + encode(text) + EOS: how every document is stored.
  std::vector<int32_t> encode_document(std::string_view text) const;
  // The same ids, handed to `sink` in one or more spans in order, so a long
  // document is never held as ids whole where the tokenizer can cut it
  // (the byte tokenizer streams it in blocks; others encode it at once).
  using IdSink = std::function<void(std::span<const int32_t>)>;
  virtual void encode_document_to(std::string_view text, const IdSink& sink) const;
};

// 256 byte values, then BOS=256, EOS=257, PAD=258 (vocab 259).
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kPad = 258;
  static constexpr int64_t kVocab = 259;

  std::vector<int32_t> encode(std::string_view text) const override;
  void encode_document_to(std::string_view text, const IdSink& sink) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return kVocab; }
  int32_t bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }
  int32_t pad_id() const override { return kPad; }
  int64_t token_bytes(int32_t id) const override { return id >= 0 && id < 256 ? 1 : 0; }
  nlohmann::json describe() const override;
};

// Rebuilds a tokenizer from describe() output; DataError on an unknown type
// or on a description whose ids do not match the type.
std::unique_ptr<Tokenizer> make_tokenizer(const nlohmann::json& description);

// The description without embedded model bytes, for printing.
nlohmann::json tokenizer_summary(const nlohmann::json& description);

}  // namespace meshtrain::data
