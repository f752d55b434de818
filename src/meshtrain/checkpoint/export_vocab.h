// A tokenizer's vocabulary the way exported model files list it (GGUF's
// tokenizer.ggml.* arrays, Hugging Face's tokenizer.json): one entry per
// model row, with its text, score and kind (docs/checkpoints.md, "Tokenizer
// files"). The byte tokenizer becomes a byte-level vocabulary: byte b is the
// one character GPT-2's byte-to-unicode table gives it, so byte-level BPE
// runtimes with no merges reproduce it exactly; BOS/EOS/PAD are control
// tokens <s>, </s>, <pad>. A SentencePiece model lists its own pieces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/data/sentencepiece_tokenizer.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::checkpoint {

// The kinds are SentencePiece's piece types, which are also GGUF's token types.
using TokenKind = data::SentencePieceTokenizer::PieceKind;

struct VocabEntry {
  std::string text;
  float score = 0;
  TokenKind kind = TokenKind::Normal;
};

struct ExportVocab {
  enum class Model { ByteLevel, SentencePieceBpe, SentencePieceUnigram } model = Model::ByteLevel;
  std::vector<VocabEntry> entries;  // model_vocab rows; rows past the tokenizer's are unused <extra_N>
  int32_t bos = -1, eos = -1, pad = -1, unk = -1;
  bool add_dummy_prefix = false;  // SentencePiece: a space is put before the text
  const std::string& text(int32_t id) const { return entries.at(size_t(id)).text; }
};

// CheckpointError when the model has fewer rows than the tokenizer has ids.
ExportVocab export_vocab(const data::Tokenizer& tokenizer, int64_t model_vocab);

// UTF-8 of the character GPT-2's byte-level table assigns to byte `b`:
// printable Latin-1 bytes stand for themselves, the others for U+0100 on.
std::string byte_level_char(uint8_t b);

// A SentencePiece BPE vocabulary's merges as "left right" pairs, in
// priority order: every split of a normal piece into two pieces of the
// vocabulary, ordered by the merged piece's id, then the parts' ids.
std::vector<std::string> bpe_merges(const ExportVocab& vocab);

}  // namespace meshtrain::checkpoint
