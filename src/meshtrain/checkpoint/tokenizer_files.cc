#include "meshtrain/checkpoint/tokenizer_files.h"

#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/data/sentencepiece_tokenizer.h"

namespace meshtrain::checkpoint {

using nlohmann::json;

namespace {

const char* const kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

json replace(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

}  // namespace

json hf_tokenizer_json(const ExportVocab& v) {
  json added = json::array();
  for (size_t id = 0; id < v.entries.size(); ++id) {
    const auto& e = v.entries[id];
    if (e.kind != TokenKind::Control && e.kind != TokenKind::Unknown && e.kind != TokenKind::UserDefined) continue;
    added.push_back({{"id", id},
                     {"content", e.text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", e.kind != TokenKind::UserDefined}});
  }
  const std::string bos = v.text(v.bos);
  json t = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
              {"pair",
               {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
              {"special_tokens", {{bos, {{"id", bos}, {"ids", {v.bos}}, {"tokens", {bos}}}}}}}}};
  json vocab = json::object();
  for (size_t id = 0; id < v.entries.size(); ++id) vocab[v.entries[id].text] = id;
  if (v.model == ExportVocab::Model::ByteLevel) {
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                             {"use_regex", false}};
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = byte_level;
    t["decoder"] = byte_level;
    t["model"] = {{"type", "BPE"},     {"dropout", nullptr},    {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                  {"vocab", vocab},    {"merges", json::array()}};
    return t;
  }
  // SentencePiece: spaces become U+2581 (after an optional leading one);
  // decoding maps them back, joins byte pieces, and drops that leading space.
  json norm = json::array();
  if (v.add_dummy_prefix) norm.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
  norm.push_back(replace(" ", kSpace));
  t["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
  t["pre_tokenizer"] = nullptr;
  json dec = json::array({replace(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (v.add_dummy_prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  t["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
  const json unk = v.unk >= 0 ? json(v.text(v.unk)) : json(nullptr);
  if (v.model == ExportVocab::Model::SentencePieceBpe) {
    t["model"] = {{"type", "BPE"},     {"dropout", nullptr},   {"unk_token", unk},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},  {"byte_fallback", true}, {"ignore_merges", false},
                  {"vocab", vocab},    {"merges", bpe_merges(v)}};
  } else {
    json pieces = json::array();
    for (const auto& e : v.entries) pieces.push_back({e.text, e.score});
    t["model"] = {{"type", "Unigram"}, {"unk_id", v.unk >= 0 ? json(v.unk) : json(nullptr)},
                  {"vocab", pieces},   {"byte_fallback", true}};
  }
  return t;
}

std::vector<std::string> tokenizer_file_names(const json& description) {
  std::vector<std::string> names = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
  if (description.value("type", "") == "sentencepiece") names.push_back("tokenizer.model");
  return names;
}

std::vector<std::string> write_tokenizer_files(const json& description, const std::filesystem::path& dir,
                                               int64_t model_vocab, int64_t max_length, json* config) {
  const auto tok = data::make_tokenizer(description);  // validates the embedded model
  (*config)["bos_token_id"] = tok->bos_id();
  (*config)["eos_token_id"] = tok->eos_id();
  (*config)["pad_token_id"] = tok->pad_id();
  const ExportVocab v = export_vocab(*tok, model_vocab);
  json special = {{"bos_token", v.text(v.bos)}, {"eos_token", v.text(v.eos)}, {"pad_token", v.text(v.pad)}};
  if (v.unk >= 0) special["unk_token"] = v.text(v.unk);
  json tc = special;
  tc["tokenizer_class"] = "PreTrainedTokenizerFast";
  tc["add_bos_token"] = true;
  tc["add_eos_token"] = false;
  tc["model_max_length"] = max_length;
  tc["clean_up_tokenization_spaces"] = false;
  std::vector<std::string> written;
  auto put = [&](const std::string& name, const std::string& text) {
    atomic_write_file(dir, name, text);
    written.push_back((dir / name).string());
  };
  put("tokenizer.json", hf_tokenizer_json(v).dump(2) + "\n");
  put("tokenizer_config.json", tc.dump(2) + "\n");
  put("special_tokens_map.json", special.dump(2) + "\n");
  if (const auto* sp = dynamic_cast<const data::SentencePieceTokenizer*>(tok.get()))
    put("tokenizer.model", sp->model_bytes());
  return written;
}

}  // namespace meshtrain::checkpoint
