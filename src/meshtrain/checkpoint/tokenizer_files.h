// The tokenizer of an exported model, the way Hugging Face tools look for
// it: the special-token ids in config.json and, for SentencePiece, the model
// file tokenizer.model beside the weights.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace meshtrain::checkpoint {

// Adds bos/eos/pad_token_id from `tokenizer_description` to `config` and
// writes `dir`/tokenizer.model when the tokenizer is SentencePiece; returns
// its path ("" for the byte tokenizer, which has no file).
std::string write_tokenizer_files(const nlohmann::json& tokenizer_description, const std::filesystem::path& dir,
                                  nlohmann::json* config);

}  // namespace meshtrain::checkpoint
