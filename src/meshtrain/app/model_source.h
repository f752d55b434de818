// Where generate and eval take a trained model from: a checkpoint (step
// directory or root with `latest`) or an exported .safetensors file (with
// config.json, and tokenizer.model for SentencePiece, beside it).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/reader.h"
#include "meshtrain/checkpoint/safetensors.h"
#include "meshtrain/data/tokenizer.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::app {

class ModelSource {
 public:
  static ModelSource open(const std::string& path);

  const model::ModelConfig& config() const { return config_; }
  // The tokenizer the model was trained with (byte tokenizer when the
  // source records none).
  const nlohmann::json& tokenizer_description() const { return tokenizer_; }
  std::unique_ptr<data::Tokenizer> tokenizer() const { return data::make_tokenizer(tokenizer_); }
  // The checkpoint's run metadata ("data", "layout", ...); empty for a
  // safetensors file.
  nlohmann::json metadata() const { return reader_ ? reader_->metadata() : nlohmann::json::object(); }
  void load_weights(model::Transformer& model) const;
  std::unique_ptr<model::Transformer> build_model() const;

 private:
  std::optional<checkpoint::CheckpointReader> reader_;
  std::optional<checkpoint::SafetensorsReader> file_;
  model::ModelConfig config_;
  nlohmann::json tokenizer_;
};

}  // namespace meshtrain::app
