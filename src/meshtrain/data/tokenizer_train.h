// Training a SentencePiece model on corpus files (`meshtrain tokenizer
// train`). Documents are read like `data prepare` reads them; long
// documents are cut at line ends into pieces of at most ~2 KiB, since
// SentencePiece trains on bounded "sentences". The model uses the id layout
// SentencePieceTokenizer expects (UNK 0, BOS 1, EOS 2, PAD 3), identity
// normalization, no added whitespace, '\n' as a piece of its own and byte
// fallback, so every text round-trips exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/data/corpus_reader.h"

namespace meshtrain::data {

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // files and directories
  InputFormat format = InputFormat::Auto;
  int64_t vocab_size = 4096;
  std::string model_type = "bpe";  // bpe | unigram
  int threads = 1;
};

struct TokenizerTrainResult {
  std::string model_bytes;   // a serialized SentencePiece model (tokenizer.model)
  int64_t documents = 0, pieces = 0, bytes = 0;
  int64_t vocab_size = 0;    // may be below the request on a small corpus (unigram)
  double seconds = 0;
};

// ConfigError for a bad vocabulary size or model type; DataError for
// unreadable or empty inputs or a corpus too small for the vocabulary.
TokenizerTrainResult train_sentencepiece(const TokenizerTrainOptions& options);

}  // namespace meshtrain::data
