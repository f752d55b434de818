// A SentencePiece subword tokenizer (BPE or unigram, Debian's
// libsentencepiece) behind the Tokenizer interface. Ids follow the layout
// `meshtrain tokenizer train` produces: UNK 0, BOS 1, EOS 2, PAD 3; text
// round-trips exactly (identity normalization, no added whitespace, byte
// fallback for characters outside the vocabulary).
//
// describe() embeds the serialized model (base64) with its SHA-256, so
// dataset meta.json and checkpoint metadata stay self-contained; the same
// bytes are what `ckpt export` writes as tokenizer.model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meshtrain/data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace meshtrain::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // DataError (naming `origin`) when the bytes are not a SentencePiece model
  // or it has no BOS, EOS or PAD piece.
  static std::unique_ptr<SentencePieceTokenizer> from_model(std::string model_bytes,
                                                            const std::string& origin = "model");
  static std::unique_ptr<SentencePieceTokenizer> from_file(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_; }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  int32_t pad_id() const override { return pad_; }
  int32_t unk_id() const { return unk_; }
  int64_t token_bytes(int32_t id) const override;
  nlohmann::json describe() const override;

  // The vocabulary as stored in the model, in id order: what exported
  // vocabularies (GGUF, tokenizer.json) list.
  enum class PieceKind { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };
  struct Piece {
    std::string text;  // spaces appear as U+2581; byte pieces as <0xNN>
    float score = 0;
    PieceKind kind = PieceKind::Normal;
  };
  const std::vector<Piece>& pieces() const { return pieces_; }
  bool is_bpe() const { return bpe_; }  // else unigram
  bool adds_dummy_prefix() const { return dummy_prefix_; }

  const std::string& model_bytes() const { return model_; }
  const std::string& sha256() const { return sha256_; }

 private:
  SentencePieceTokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string model_, sha256_;
  std::vector<int32_t> piece_bytes_;  // token_bytes per id
  std::vector<Piece> pieces_;
  bool bpe_ = false, dummy_prefix_ = true;
  int64_t vocab_ = 0;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
};

}  // namespace meshtrain::data
