#include "meshtrain/app/model_source.h"

#include <filesystem>

#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/model_weights.h"
#include "meshtrain/core/allocator.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"

namespace meshtrain::app {
namespace ck = meshtrain::checkpoint;
namespace fs = std::filesystem;

ModelSource ModelSource::open(const std::string& path) {
  ModelSource s;
  s.tokenizer_ = data::ByteTokenizer().describe();
  if (fs::is_regular_file(path)) {
    s.file_.emplace(ck::SafetensorsReader::open(path));
    s.config_ = ck::model_config_of(*s.file_);
    const auto it = s.file_->metadata().find("meshtrain.tokenizer");
    const fs::path beside = fs::path(path).parent_path() / "tokenizer.model";
    if (it != s.file_->metadata().end()) s.tokenizer_ = nlohmann::json::parse(it->second);
    else if (fs::exists(beside)) s.tokenizer_ = data::SentencePieceTokenizer::from_file(beside.string())->describe();
  } else {
    s.reader_.emplace(ck::CheckpointReader::open(path));
    s.config_ = ck::model_config_of(*s.reader_);
    if (s.reader_->metadata().contains(ck::kMetaTokenizer)) s.tokenizer_ = s.reader_->metadata()[ck::kMetaTokenizer];
  }
  const auto tok = s.tokenizer();
  MT_REQUIRE(ConfigError, tok->vocab_size() <= s.config_.vocab_size, path, ": tokenizer vocabulary ",
             tok->vocab_size(), " exceeds the model's ", s.config_.vocab_size);
  return s;
}

void ModelSource::load_weights(model::Transformer& model) const {
  if (file_) ck::load_model_weights(*file_, model);
  else ck::load_model_weights(*reader_, model);
}

std::unique_ptr<model::Transformer> ModelSource::build_model() const {
  auto m = std::make_unique<model::Transformer>(config_, CachingAllocator::create());
  load_weights(*m);
  return m;
}

}  // namespace meshtrain::app
