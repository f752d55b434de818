#include "meshtrain/checkpoint/tokenizer_files.h"

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"

namespace meshtrain::checkpoint {

std::string write_tokenizer_files(const nlohmann::json& description, const std::filesystem::path& dir,
                                  nlohmann::json* config) {
  const auto tok = data::make_tokenizer(description);  // validates the embedded model
  (*config)["bos_token_id"] = tok->bos_id();
  (*config)["eos_token_id"] = tok->eos_id();
  (*config)["pad_token_id"] = tok->pad_id();
  const auto* sp = dynamic_cast<const data::SentencePieceTokenizer*>(tok.get());
  if (!sp) return "";
  atomic_write_file(dir, "tokenizer.model", sp->model_bytes());
  return (dir / "tokenizer.model").string();
}

}  // namespace meshtrain::checkpoint
