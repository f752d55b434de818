// `meshtrain data prepare`: corpus files -> DIR/{train.bin, val.bin, meta.json}.
// Every document is stored as BOS + tokens + EOS. The train/validation split
// is a pure function of (seed, document index, val_fraction), so preparing
// the same inputs again gives identical shards.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meshtrain/core/status_line.h"
#include "meshtrain/data/corpus_reader.h"
#include "meshtrain/data/digest.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and directories
  std::string out_dir;
  InputFormat format = InputFormat::Auto;
  double val_fraction = 0.05;  // in (0, 1)
  uint64_t seed = 0;
  bool overwrite = false;  // replace an existing out_dir (atomically, at the end)
  // Called as documents are read ("reading", pass 1) and tokenized
  // ("tokenizing", pass 2) with the input bytes done of the total.
  ProgressFn progress;
};

struct PrepareResult {
  std::string out_dir;
  int64_t source_files = 0;
  int64_t documents = 0;
  int64_t train_documents = 0, val_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  double seconds = 0;
};

// Writes into a temp directory beside out_dir and renames it into place at
// the end: on any error (DataError for missing/unreadable/empty input or a
// bad JSONL line) nothing is left behind.
PrepareResult prepare_dataset(const PrepareOptions& opts, const Tokenizer& tokenizer = ByteTokenizer());

// Split of n documents: 1 = validation. A document goes to validation when
// its hash u(seed, index) in [0, 1) is below val_fraction; with n >= 2, an
// empty split takes the document with the extreme hash (lowest u moves to
// validation, highest to train), so both splits are non-empty.
std::vector<uint8_t> split_documents(int64_t n, uint64_t seed, double val_fraction);

}  // namespace meshtrain::data
