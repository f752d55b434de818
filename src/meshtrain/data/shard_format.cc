#include "meshtrain/data/shard_format.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain::data {
namespace {

std::string errno_text() { return std::strerror(errno); }

void fsync_parent_dir(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::filesystem::path dir = parent.empty() ? std::filesystem::path(".") : parent;
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: makes the rename durable
    ::close(dfd);
  }
}

// Largest id in the array. Written as a plain max loop over unsigned values
// so the compiler vectorizes it; a negative i32 becomes huge and fails the
// vocab check below.
template <typename U>
U max_id(const U* p, uint64_t n) {
  U m = 0;
  for (uint64_t i = 0; i < n; ++i) m = std::max(m, p[i]);
  return m;
}

}  // namespace

size_t token_dtype_size(TokenDType t) { return t == TokenDType::U16 ? 2 : 4; }
const char* token_dtype_name(TokenDType t) { return t == TokenDType::U16 ? "u16" : "i32"; }
TokenDType token_dtype_for_vocab(int64_t vocab) { return vocab <= 65535 ? TokenDType::U16 : TokenDType::I32; }

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// ---------------------------------------------------------------- writer

ShardWriter::ShardWriter(std::string path, int64_t vocab_size)
    : path_(std::move(path)), vocab_(vocab_size), dtype_(token_dtype_for_vocab(vocab_size)) {
  MT_REQUIRE(DataError, vocab_size > 0 && vocab_size <= int64_t(INT32_MAX),
             "shard ", path_, ": vocab size ", vocab_size, " out of range");
  tmp_path_ = path_ + ".tmp.XXXXXX";
  fd_ = ::mkstemp(tmp_path_.data());
  MT_REQUIRE(DataError, fd_ >= 0, "cannot create temp file for shard ", path_, ": ", errno_text());
  ::fchmod(fd_, 0644);  // mkstemp makes 0600; shards are ordinary readable files
  const ShardHeader zero{};  // placeholder, rewritten by finish()
  try {
    write_bytes(&zero, sizeof(zero));
  } catch (...) {
    discard();
    throw;
  }
}

ShardWriter::~ShardWriter() {
  if (!finished_) discard();
}

void ShardWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
}

void ShardWriter::write_bytes(const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    MT_REQUIRE(DataError, w > 0, "writing shard ", path_, " failed: ", errno_text());
    c += w;
    n -= size_t(w);
  }
}

void ShardWriter::add_document(const std::vector<int32_t>& tokens) {
  begin_document();
  add_tokens(tokens);
  end_document();
}

void ShardWriter::begin_document() {
  MT_REQUIRE(DataError, !finished_, "shard ", path_, ": add_document after finish");
  MT_CHECK(!in_document_, "shard ", path_, ": a document is already open");
  in_document_ = true;
  open_tokens_ = 0;
}

void ShardWriter::add_tokens(std::span<const int32_t> tokens) {
  MT_CHECK(in_document_, "shard ", path_, ": add_tokens outside a document");
  for (size_t i = 0; i < tokens.size(); ++i)
    MT_REQUIRE(DataError, tokens[i] >= 0 && tokens[i] < vocab_, "shard ", path_, ": document ",
               num_documents(), " token ", open_tokens_ + i, " has id ", tokens[i], " outside vocab [0, ", vocab_, ")");
  if (dtype_ == TokenDType::U16) {
    // In blocks: the 16-bit copy never grows with the document.
    constexpr size_t kBlock = size_t(1) << 16;
    for (size_t at = 0; at < tokens.size(); at += kBlock) {
      const auto part = tokens.subspan(at, std::min(kBlock, tokens.size() - at));
      u16_buf_.assign(part.begin(), part.end());
      write_bytes(u16_buf_.data(), u16_buf_.size() * 2);
    }
  } else {
    write_bytes(tokens.data(), tokens.size() * 4);
  }
  open_tokens_ += tokens.size();
}

void ShardWriter::end_document() {
  MT_CHECK(in_document_, "shard ", path_, ": end_document without begin_document");
  in_document_ = false;
  offsets_.push_back(offsets_.back() + open_tokens_);
}

void ShardWriter::finish() {
  MT_REQUIRE(DataError, !finished_, "shard ", path_, ": finish called twice");
  try {
    ShardHeader h{};
    std::memcpy(h.magic, kShardMagic, 8);
    h.version = kShardVersion;
    h.dtype = uint32_t(dtype_);
    h.vocab_size = uint64_t(vocab_);
    h.num_documents = uint64_t(num_documents());
    h.num_tokens = offsets_.back();
    h.tokens_offset = kShardHeaderBytes;
    const uint64_t end_tokens = kShardHeaderBytes + h.num_tokens * token_dtype_size(dtype_);
    h.index_offset = (end_tokens + 7) / 8 * 8;
    const char pad[8] = {};
    write_bytes(pad, h.index_offset - end_tokens);
    write_bytes(offsets_.data(), offsets_.size() * sizeof(uint64_t));
    uint64_t sum = fnv1a64(&h, offsetof(ShardHeader, checksum));
    h.checksum = fnv1a64(offsets_.data(), offsets_.size() * sizeof(uint64_t), sum);
    MT_REQUIRE(DataError, ::pwrite(fd_, &h, sizeof(h), 0) == ssize_t(sizeof(h)),
               "writing shard header ", path_, " failed: ", errno_text());
    MT_REQUIRE(DataError, ::fsync(fd_) == 0, "fsync of shard ", path_, " failed: ", errno_text());
    ::close(fd_);
    fd_ = -1;
    MT_REQUIRE(DataError, ::rename(tmp_path_.c_str(), path_.c_str()) == 0, "renaming ", tmp_path_, " to ",
               path_, " failed: ", errno_text());
    fsync_parent_dir(path_);
  } catch (...) {
    discard();
    throw;
  }
  finished_ = true;
}

// ---------------------------------------------------------------- reader

ShardReader::ShardReader(ShardReader&& o) noexcept { *this = std::move(o); }

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    header_ = o.header_;
  }
  return *this;
}

ShardReader::~ShardReader() { unmap(); }

void ShardReader::unmap() noexcept {
  if (base_) ::munmap(const_cast<unsigned char*>(base_), size_);
  base_ = nullptr;
  size_ = 0;
}

ShardReader ShardReader::open(const std::string& path) {
  ShardReader r;
  r.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_REQUIRE(DataError, fd >= 0, "cannot open shard ", path, ": ", errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    MT_THROW(DataError, "cannot stat shard ", path, ": ", errno_text());
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < kShardHeaderBytes) {
    ::close(fd);
    MT_THROW(DataError, "shard ", path, ": truncated: ", size, " bytes is smaller than the ",
             kShardHeaderBytes, "-byte header");
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  MT_REQUIRE(DataError, m != MAP_FAILED, "cannot mmap shard ", path, ": ", errno_text());
  r.base_ = static_cast<const unsigned char*>(m);
  r.size_ = size;
  ShardHeader& h = r.header_;
  std::memcpy(&h, r.base_, sizeof(h));

  // Every check bounds a quantity by the file size before multiplying, so
  // nothing can overflow however hostile the header is.
  MT_REQUIRE(DataError, std::memcmp(h.magic, kShardMagic, 8) == 0, "shard ", path,
             ": bad magic (not a meshtrain token shard)");
  MT_REQUIRE(DataError, h.version == kShardVersion, "shard ", path, ": unknown format version ", h.version,
             " (this build reads version ", kShardVersion, ")");
  MT_REQUIRE(DataError, h.dtype == uint32_t(TokenDType::U16) || h.dtype == uint32_t(TokenDType::I32),
             "shard ", path, ": unknown token dtype code ", h.dtype);
  const TokenDType dt = TokenDType(h.dtype);
  const uint64_t max_vocab = dt == TokenDType::U16 ? 65536 : uint64_t(INT32_MAX);
  MT_REQUIRE(DataError, h.vocab_size > 0 && h.vocab_size <= max_vocab, "shard ", path, ": vocab size ",
             h.vocab_size, " invalid for dtype ", token_dtype_name(dt));
  MT_REQUIRE(DataError, h.tokens_offset == kShardHeaderBytes, "shard ", path, ": token array offset ",
             h.tokens_offset, " != ", kShardHeaderBytes);
  const uint64_t es = token_dtype_size(dt);
  MT_REQUIRE(DataError, h.num_tokens <= (size - kShardHeaderBytes) / es, "shard ", path, ": truncated: ",
             h.num_tokens, " tokens do not fit in ", size, " bytes");
  const uint64_t end_tokens = kShardHeaderBytes + h.num_tokens * es;
  MT_REQUIRE(DataError, h.index_offset % 8 == 0 && h.index_offset >= end_tokens && h.index_offset <= size,
             "shard ", path, ": document index offset ", h.index_offset, " out of range [", end_tokens, ", ",
             size, "] or unaligned");
  MT_REQUIRE(DataError, h.num_documents < (size - h.index_offset) / 8, "shard ", path, ": truncated: index of ",
             h.num_documents, " documents does not fit in ", size, " bytes");
  const uint64_t index_bytes = (h.num_documents + 1) * 8;
  MT_REQUIRE(DataError, h.index_offset + index_bytes == size, "shard ", path, ": file is ", size,
             " bytes but the header describes ", h.index_offset + index_bytes, " (truncated or trailing data)");
  const uint64_t* index = r.index();
  uint64_t sum = fnv1a64(&h, offsetof(ShardHeader, checksum));
  sum = fnv1a64(index, index_bytes, sum);
  MT_REQUIRE(DataError, sum == h.checksum, "shard ", path, ": header/index checksum mismatch (corrupt file)");
  MT_REQUIRE(DataError, index[0] == 0 && index[h.num_documents] == h.num_tokens, "shard ", path,
             ": document index must start at 0 and end at num_tokens ", h.num_tokens);
  for (uint64_t d = 0; d < h.num_documents; ++d)
    MT_REQUIRE(DataError, index[d] <= index[d + 1], "shard ", path, ": document index not monotonic at document ",
               d, " (", index[d], " > ", index[d + 1], ")");

  const uint64_t m_id = dt == TokenDType::U16
                            ? max_id(static_cast<const uint16_t*>(r.tokens()), h.num_tokens)
                            : max_id(static_cast<const uint32_t*>(r.tokens()), h.num_tokens);
  if (h.num_tokens > 0 && m_id >= h.vocab_size) {
    // Slow path only on failure: locate the first bad token for the message.
    uint64_t pos = 0;
    int64_t id = 0;
    for (; pos < h.num_tokens; ++pos) {
      id = dt == TokenDType::U16 ? int64_t(static_cast<const uint16_t*>(r.tokens())[pos])
                                 : int64_t(static_cast<const int32_t*>(r.tokens())[pos]);
      if (id < 0 || uint64_t(id) >= h.vocab_size) break;
    }
    const uint64_t doc = uint64_t(std::upper_bound(index, index + h.num_documents + 1, pos) - index) - 1;
    MT_THROW(DataError, "shard ", path, ": token id ", id, " at position ", pos, " (document ", doc,
             ") is outside vocab [0, ", h.vocab_size, ")");
  }
  return r;
}

}  // namespace meshtrain::data
