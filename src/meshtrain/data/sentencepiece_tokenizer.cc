#include "meshtrain/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/data/corpus_reader.h"
#include "meshtrain/data/digest.h"

namespace meshtrain::data {
namespace {

// The few fields of SentencePiece's ModelProto the exporters need, read from
// the protobuf wire format (varints and length-delimited fields only; the
// library does not expose the proto): pieces (1: piece 1, score 2, type 3),
// trainer_spec (2: model_type 3), normalizer_spec (3: add_dummy_prefix 3).
struct ProtoField {
  uint32_t number = 0, wire = 0;
  uint64_t varint = 0;
  std::string_view bytes;  // wire type 2; 4 bytes for wire type 5
};

uint64_t read_varint(std::string_view s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    MT_REQUIRE(DataError, pos < s.size(), "sentencepiece model: truncated varint");
    const uint8_t b = uint8_t(s[pos++]);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  MT_THROW(DataError, "sentencepiece model: varint too long");
}

template <typename Fn>
void for_each_field(std::string_view s, Fn fn) {
  for (size_t pos = 0; pos < s.size();) {
    const uint64_t key = read_varint(s, pos);
    ProtoField f{uint32_t(key >> 3), uint32_t(key & 7), 0, {}};
    if (f.wire == 0) {
      f.varint = read_varint(s, pos);
    } else if (f.wire == 1 || f.wire == 5) {
      const size_t n = f.wire == 1 ? 8 : 4;
      MT_REQUIRE(DataError, pos + n <= s.size(), "sentencepiece model: truncated field");
      f.bytes = s.substr(pos, n);
      pos += n;
    } else if (f.wire == 2) {
      const uint64_t n = read_varint(s, pos);
      MT_REQUIRE(DataError, n <= s.size() - pos, "sentencepiece model: truncated field");
      f.bytes = s.substr(pos, size_t(n));
      pos += size_t(n);
    } else {
      MT_THROW(DataError, "sentencepiece model: unexpected wire type ", f.wire);
    }
    fn(f);
  }
}

}  // namespace

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_model(std::string model_bytes,
                                                                           const std::string& origin) {
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = t->sp_->LoadFromSerializedProto(model_bytes);
  MT_REQUIRE(DataError, status.ok(), origin, " is not a SentencePiece model: ", status.ToString());
  t->vocab_ = t->sp_->GetPieceSize();
  t->bos_ = t->sp_->bos_id();
  t->eos_ = t->sp_->eos_id();
  t->pad_ = t->sp_->pad_id();
  t->unk_ = t->sp_->unk_id();
  MT_REQUIRE(DataError, t->bos_ >= 0 && t->eos_ >= 0 && t->pad_ >= 0, origin,
             ": a SentencePiece model for meshtrain needs BOS, EOS and PAD pieces (bos ", t->bos_, ", eos ", t->eos_,
             ", pad ", t->pad_, "); train one with `meshtrain tokenizer train`");
  // Bytes of text behind each id, for bits per byte: "\xe2\x96\x81" (U+2581)
  // stands for one space, <0xNN> byte pieces for one byte, control pieces
  // (BOS/EOS/PAD) and UNK for none.
  t->piece_bytes_.resize(size_t(t->vocab_));
  for (int32_t id = 0; id < t->vocab_; ++id) {
    if (t->sp_->IsControl(id) || t->sp_->IsUnknown(id)) continue;
    if (t->sp_->IsByte(id)) {
      t->piece_bytes_[size_t(id)] = 1;
      continue;
    }
    const std::string piece = t->sp_->IdToPiece(id);
    int64_t n = 0;
    for (size_t i = 0; i < piece.size();) {
      if (piece.compare(i, 3, "\xe2\x96\x81") == 0) i += 3;
      else ++i;
      ++n;
    }
    t->piece_bytes_[size_t(id)] = int32_t(n);
  }
  for_each_field(model_bytes, [&](const ProtoField& f) {
    if (f.number == 1 && f.wire == 2) {
      Piece p;
      for_each_field(f.bytes, [&](const ProtoField& g) {
        if (g.number == 1 && g.wire == 2) p.text = std::string(g.bytes);
        if (g.number == 2 && g.wire == 5) std::memcpy(&p.score, g.bytes.data(), 4);
        if (g.number == 3 && g.wire == 0) p.kind = PieceKind(g.varint);
      });
      t->pieces_.push_back(std::move(p));
    } else if (f.number == 2 && f.wire == 2) {
      for_each_field(f.bytes, [&](const ProtoField& g) {
        if (g.number == 3 && g.wire == 0) t->bpe_ = g.varint == 2;  // UNIGRAM 1 (the default), BPE 2
      });
    } else if (f.number == 3 && f.wire == 2) {
      for_each_field(f.bytes, [&](const ProtoField& g) {
        if (g.number == 3 && g.wire == 0) t->dummy_prefix_ = g.varint != 0;
      });
    }
  });
  MT_REQUIRE(DataError, int64_t(t->pieces_.size()) == t->vocab_, origin, ": ", t->pieces_.size(),
             " pieces in the model's proto but the processor reports ", t->vocab_);
  t->model_ = std::move(model_bytes);
  t->sha256_ = sha256_hex(t->model_);
  return t;
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_file(const std::string& path) {
  return from_model(read_file(path), path);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
  MT_REQUIRE(DataError, status.ok(), "sentencepiece encode failed: ", status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> v;
  v.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    MT_REQUIRE(DataError, ids[i] >= 0 && ids[i] < vocab_, "sentencepiece tokenizer: id ", ids[i], " at position ", i,
               " is outside the vocabulary [0, ", vocab_, ")");
    v.push_back(ids[i]);
  }
  std::string out;
  const auto status = sp_->Decode(v, &out);
  MT_REQUIRE(DataError, status.ok(), "sentencepiece decode failed: ", status.ToString());
  return out;
}

int64_t SentencePieceTokenizer::token_bytes(int32_t id) const {
  MT_REQUIRE(DataError, id >= 0 && id < vocab_, "sentencepiece tokenizer: id ", id, " is outside the vocabulary");
  return piece_bytes_[size_t(id)];
}

nlohmann::json SentencePieceTokenizer::describe() const {
  return {{"type", "sentencepiece"}, {"vocab_size", vocab_},         {"bos_id", bos_},
          {"eos_id", eos_},          {"pad_id", pad_},               {"unk_id", unk_},
          {"sha256", sha256_},       {"model_base64", base64_encode(model_)}};
}

}  // namespace meshtrain::data
