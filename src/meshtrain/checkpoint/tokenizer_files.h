// The tokenizer of an exported model the way Hugging Face tools look for it
// (docs/checkpoints.md, "Tokenizer files"): tokenizer.json (the fast
// tokenizer: byte-level BPE without merges for the byte tokenizer; the
// SentencePiece model's pieces, with BPE merges or unigram scores),
// tokenizer_config.json and special_tokens_map.json (the special tokens, BOS
// added in front), tokenizer.model (the SentencePiece model itself), and the
// special-token ids in config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/export_vocab.h"

namespace meshtrain::checkpoint {

// tokenizer.json's content for `vocab` (export_vocab.h).
nlohmann::json hf_tokenizer_json(const ExportVocab& vocab);

// The names of the files write_tokenizer_files writes for this tokenizer.
std::vector<std::string> tokenizer_file_names(const nlohmann::json& tokenizer_description);

// Adds bos/eos/pad_token_id to `config` and writes the tokenizer files into
// `dir`; returns their paths. `model_vocab` rows (unused ids past the
// tokenizer's are listed as <extra_N>), `max_length` the model's longest
// sequence.
std::vector<std::string> write_tokenizer_files(const nlohmann::json& tokenizer_description,
                                               const std::filesystem::path& dir, int64_t model_vocab,
                                               int64_t max_length, nlohmann::json* config);

}  // namespace meshtrain::checkpoint
