// Token shard files (.bin): one split of a prepared dataset. Layout and
// checks are documented in docs/data-format.md. The writer is atomic (temp
// file, fsync, rename); the reader mmaps and validates the whole file at
// open, so later accesses need no checks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace meshtrain::data {

inline constexpr char kShardMagic[8] = {'M', 'T', 'S', 'H', 'A', 'R', 'D', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kShardHeaderBytes = 64;

enum class TokenDType : uint32_t { U16 = 1, I32 = 2 };
size_t token_dtype_size(TokenDType t);
const char* token_dtype_name(TokenDType t);
// u16 when every id fits (vocab <= 65535), else i32.
TokenDType token_dtype_for_vocab(int64_t vocab_size);

// The fixed 64-byte little-endian header.
struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t dtype;           // TokenDType
  uint64_t vocab_size;
  uint64_t num_documents;
  uint64_t num_tokens;
  uint64_t tokens_offset;   // == kShardHeaderBytes
  uint64_t index_offset;    // 8-aligned, after the tokens
  uint64_t checksum;        // FNV-1a 64 of header bytes [0, 56) then the index
};
static_assert(sizeof(ShardHeader) == kShardHeaderBytes);

// FNV-1a 64, continuing from `h`.
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

// Streams documents into `path` atomically. Nothing appears at `path` until
// finish() succeeds; destroying an unfinished writer removes the temp file.
class ShardWriter {
 public:
  ShardWriter(std::string path, int64_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends one document; DataError if an id is outside [0, vocab).
  void add_document(const std::vector<int32_t>& tokens);
  // The same in pieces: begin_document, add_tokens any number of times,
  // end_document (a long document need not be held whole).
  void begin_document();
  void add_tokens(std::span<const int32_t> tokens);
  void end_document();
  void finish();

  int64_t num_documents() const { return int64_t(offsets_.size()) - 1; }
  int64_t num_tokens() const { return int64_t(offsets_.back()); }

 private:
  void write_bytes(const void* p, size_t n);
  void discard() noexcept;

  std::string path_, tmp_path_;
  int fd_ = -1;
  int64_t vocab_;
  TokenDType dtype_;
  std::vector<uint64_t> offsets_{0};
  std::vector<uint16_t> u16_buf_;
  uint64_t open_tokens_ = 0;  // of the document begun
  bool in_document_ = false;
  bool finished_ = false;
};

// Read-only mmap of a validated shard.
class ShardReader {
 public:
  // Validates magic, version, dtype, sizes against the file size (overflow
  // safe), checksum, the document index and every token id < vocab. Each
  // failure is a DataError naming the file and the check.
  static ShardReader open(const std::string& path);
  ShardReader(ShardReader&& o) noexcept;
  ShardReader& operator=(ShardReader&& o) noexcept;
  ~ShardReader();

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  TokenDType dtype() const { return TokenDType(header_.dtype); }
  int64_t vocab_size() const { return int64_t(header_.vocab_size); }
  int64_t num_documents() const { return int64_t(header_.num_documents); }
  int64_t num_tokens() const { return int64_t(header_.num_tokens); }
  const void* tokens() const { return base_ + header_.tokens_offset; }
  const uint64_t* index() const { return reinterpret_cast<const uint64_t*>(base_ + header_.index_offset); }
  // The whole mapped file (for its digest).
  const unsigned char* file_bytes() const { return base_; }
  size_t file_size() const { return size_; }

 private:
  ShardReader() = default;
  void unmap() noexcept;
  std::string path_;
  const unsigned char* base_ = nullptr;
  size_t size_ = 0;
  ShardHeader header_{};
};

}  // namespace meshtrain::data
