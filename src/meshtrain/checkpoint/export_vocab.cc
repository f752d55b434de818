#include "meshtrain/checkpoint/export_vocab.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

std::string byte_level_char(uint8_t b) {
  auto printable = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  uint32_t cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int c = 0; c < b; ++c)
      if (!printable(c)) ++cp;
  }
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else {  // below U+0800: two bytes
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

ExportVocab export_vocab(const data::Tokenizer& tok, int64_t model_vocab) {
  MT_REQUIRE(CheckpointError, model_vocab >= tok.vocab_size(), "export: the model has ", model_vocab,
             " vocabulary rows but its tokenizer has ", tok.vocab_size(), " ids");
  ExportVocab v;
  v.bos = tok.bos_id();
  v.eos = tok.eos_id();
  v.pad = tok.pad_id();
  if (const auto* sp = dynamic_cast<const data::SentencePieceTokenizer*>(&tok)) {
    v.model = sp->is_bpe() ? ExportVocab::Model::SentencePieceBpe : ExportVocab::Model::SentencePieceUnigram;
    v.unk = sp->unk_id();
    v.add_dummy_prefix = sp->adds_dummy_prefix();
    for (const auto& p : sp->pieces()) v.entries.push_back({p.text, p.score, p.kind});
  } else {
    MT_REQUIRE(CheckpointError, tok.describe().value("type", "") == "byte", "export: tokenizer ",
               data::tokenizer_summary(tok.describe()).dump(), " has no exported vocabulary");
    for (int b = 0; b < 256; ++b) v.entries.push_back({byte_level_char(uint8_t(b)), 0.0f, TokenKind::Normal});
    v.entries.resize(size_t(tok.vocab_size()));
    v.entries[size_t(v.bos)] = {"<s>", 0.0f, TokenKind::Control};
    v.entries[size_t(v.eos)] = {"</s>", 0.0f, TokenKind::Control};
    v.entries[size_t(v.pad)] = {"<pad>", 0.0f, TokenKind::Control};
  }
  for (int64_t id = int64_t(v.entries.size()); id < model_vocab; ++id)
    v.entries.push_back({"<extra_" + std::to_string(id) + ">", 0.0f, TokenKind::Unused});
  return v;
}

std::vector<std::string> bpe_merges(const ExportVocab& v) {
  std::map<std::string, int32_t> id;
  for (size_t i = 0; i < v.entries.size(); ++i)
    if (v.entries[i].kind == TokenKind::Normal) id.emplace(v.entries[i].text, int32_t(i));
  std::vector<std::tuple<int32_t, int32_t, int32_t>> order;  // (merged, left, right)
  for (const auto& [text, merged] : id) {
    for (size_t cut = 1; cut < text.size(); ++cut) {
      if ((uint8_t(text[cut]) & 0xC0) == 0x80) continue;  // not inside a UTF-8 character
      auto l = id.find(text.substr(0, cut)), r = id.find(text.substr(cut));
      if (l != id.end() && r != id.end()) order.emplace_back(merged, l->second, r->second);
    }
  }
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (const auto& [m, l, r] : order) out.push_back(v.text(l) + " " + v.text(r));
  return out;
}

}  // namespace meshtrain::checkpoint
