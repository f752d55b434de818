// A prepared dataset split (DIR/train.bin or DIR/val.bin plus DIR/meta.json)
// seen as documents. Token storage is the shard's mmap (u16 or i32), so a
// document is a typed view, converted to int32 only when copied into a batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/data/shard_format.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::data {

// A span of token ids in the shard's storage type.
class TokenSpan {
 public:
  TokenSpan() = default;
  TokenSpan(const void* data, int64_t size, TokenDType dtype) : data_(data), size_(size), dtype_(dtype) {}
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  TokenDType dtype() const { return dtype_; }
  int32_t operator[](int64_t i) const {
    return dtype_ == TokenDType::U16 ? int32_t(static_cast<const uint16_t*>(data_)[i])
                                     : static_cast<const int32_t*>(data_)[i];
  }
  // Copies ids [begin, begin + n) to `out` as int32.
  void copy_to(int64_t begin, int64_t n, int32_t* out) const;
  std::vector<int32_t> to_vector() const;
  std::span<const uint16_t> as_u16() const;  // InternalError if not u16
  std::span<const int32_t> as_i32() const;   // InternalError if not i32

 private:
  const void* data_ = nullptr;
  int64_t size_ = 0;
  TokenDType dtype_ = TokenDType::I32;
};

class TokenDataset {
 public:
  // Opens DIR/<split>.bin ("train" or "val") and DIR/meta.json, checking that
  // the shard agrees with the recorded tokenizer and counts.
  static TokenDataset open(const std::string& dir, const std::string& split);
  // In-memory dataset (tests, tools); documents are stored as i32.
  static TokenDataset from_documents(const std::vector<std::vector<int32_t>>& docs,
                                     std::unique_ptr<Tokenizer> tokenizer = std::make_unique<ByteTokenizer>());

  int64_t num_documents() const { return n_docs_; }
  int64_t num_tokens() const { return n_docs_ == 0 ? 0 : int64_t(index_[n_docs_]); }
  int64_t document_length(int64_t i) const { return int64_t(index_[i + 1] - index_[i]); }
  TokenSpan document(int64_t i) const;  // i in [0, num_documents())
  TokenSpan all_tokens() const { return {tokens_, num_tokens(), dtype_}; }

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& split() const { return split_; }
  const std::string& source() const { return source_; }  // shard path or "<memory>"
  const nlohmann::json& meta() const { return meta_; }
  // The split's SHA-256 that meta.json records (checked against the shard
  // when opened): the dataset's identity, whatever its path. "" in memory.
  std::string content_digest() const;

 private:
  TokenDataset() = default;
  std::shared_ptr<ShardReader> shard_;
  std::shared_ptr<std::vector<int32_t>> owned_tokens_;
  std::shared_ptr<std::vector<uint64_t>> owned_index_;
  std::shared_ptr<Tokenizer> tokenizer_;
  const void* tokens_ = nullptr;
  const uint64_t* index_ = nullptr;
  int64_t n_docs_ = 0;
  TokenDType dtype_ = TokenDType::I32;
  std::string split_, source_;
  nlohmann::json meta_;
};

// Reads and parses DIR/meta.json (DataError if missing or malformed).
nlohmann::json read_dataset_meta(const std::string& dir);

}  // namespace meshtrain::data
