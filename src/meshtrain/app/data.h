// `meshtrain data prepare|inspect` and `meshtrain tokenizer train`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::app {

struct PrepareRequest {
  std::vector<std::string> inputs;
  std::string out;
  std::string format = "auto";  // auto | text | jsonl | fortune
  std::string tokenizer;        // SentencePiece model file; "": byte tokenizer
  double val_fraction = 0.05;
  uint64_t seed = 0;
  bool overwrite = false;
  bool progress = true;         // on stderr, for inputs that take a while
};
struct PrepareSummary {
  std::string out_dir, tokenizer;
  int64_t source_files = 0, documents = 0, train_documents = 0, val_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  double seconds = 0;
};
PrepareSummary prepare_data(const PrepareRequest& request);

// Counts, length histogram and the unigram-entropy baseline of both splits.
std::string inspect_data(const std::string& dir);

struct TokenizerTrainRequest {
  std::vector<std::string> inputs;
  std::string out;               // tokenizer.model
  std::string format = "auto";
  std::string type = "bpe";      // bpe | unigram
  int64_t vocab = 4096;
  bool overwrite = false;
};
struct TokenizerTrainSummary {
  std::string out;
  int64_t documents = 0, bytes = 0, vocab = 0;
  double seconds = 0;
  double bytes_per_token = 0;    // on the training text
};
TokenizerTrainSummary train_tokenizer(const TokenizerTrainRequest& request);

}  // namespace meshtrain::app
