#include "meshtrain/data/shard_format.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data_test_util.h"
#include "meshtrain/core/error.h"

namespace meshtrain::data {
namespace {

using testing::expect_error;
using testing::ScratchDir;

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& p, const std::string& b) { std::ofstream(p, std::ios::binary) << b; }

std::string write_sample(const ScratchDir& dir, int64_t vocab = 259) {
  const std::string path = dir / "s.bin";
  ShardWriter w(path, vocab);
  w.add_document({256, 1, 2, 3, 257});
  w.add_document({256, 7, 257});
  w.add_document({256, 100, 101, 102, 103, 104, 257});
  w.finish();
  return path;
}

// Rewrites the checksum so a corrupted index reaches the later checks.
void fix_checksum(std::string& b) {
  ShardHeader h;
  std::memcpy(&h, b.data(), sizeof(h));
  uint64_t sum = fnv1a64(&h, offsetof(ShardHeader, checksum));
  sum = fnv1a64(b.data() + h.index_offset, (h.num_documents + 1) * 8, sum);
  std::memcpy(b.data() + offsetof(ShardHeader, checksum), &sum, 8);
}

TEST(Shard, WriteReadRoundTripU16) {
  ScratchDir dir;
  const std::string path = write_sample(dir);
  const ShardReader r = ShardReader::open(path);
  EXPECT_EQ(r.dtype(), TokenDType::U16);
  EXPECT_EQ(r.num_documents(), 3);
  EXPECT_EQ(r.num_tokens(), 15);
  EXPECT_EQ(r.vocab_size(), 259);
  const uint64_t* idx = r.index();
  EXPECT_EQ(idx[0], 0u);
  EXPECT_EQ(idx[1], 5u);
  EXPECT_EQ(idx[2], 8u);
  EXPECT_EQ(idx[3], 15u);
  const auto* t = static_cast<const uint16_t*>(r.tokens());
  EXPECT_EQ(t[5], 256);
  EXPECT_EQ(t[6], 7);
  EXPECT_EQ(dir.count_entries(), 1);  // no temp file left
}

TEST(Shard, LargeVocabUsesI32) {
  ScratchDir dir;
  const std::string path = dir / "big.bin";
  ShardWriter w(path, 100000);
  w.add_document({0, 99999, 65536});
  w.finish();
  const ShardReader r = ShardReader::open(path);
  EXPECT_EQ(r.dtype(), TokenDType::I32);
  EXPECT_EQ(static_cast<const int32_t*>(r.tokens())[1], 99999);
}

TEST(Shard, WriterRejectsOutOfVocabAndLeavesNothing) {
  ScratchDir dir;
  {
    ShardWriter w(dir / "x.bin", 259);
    w.add_document({1, 2});
    EXPECT_THROW(w.add_document({1, 259}), DataError);
  }  // destroyed unfinished
  EXPECT_EQ(dir.count_entries(), 0);
}

TEST(Shard, EmptyShardIsValid) {
  ScratchDir dir;
  ShardWriter w(dir / "e.bin", 259);
  w.finish();
  const ShardReader r = ShardReader::open(dir / "e.bin");
  EXPECT_EQ(r.num_documents(), 0);
  EXPECT_EQ(r.num_tokens(), 0);
}

TEST(Shard, BadMagic) {
  ScratchDir dir;
  const std::string path = write_sample(dir);
  std::string b = read_bytes(path);
  b[0] = 'X';
  write_bytes(path, b);
  expect_error<DataError>([&] { ShardReader::open(path); }, "bad magic");
  expect_error<DataError>([&] { ShardReader::open(path); }, path);
}

TEST(Shard, UnknownVersion) {
  ScratchDir dir;
  const std::string path = write_sample(dir);
  std::string b = read_bytes(path);
  b[8] = 9;
  write_bytes(path, b);
  expect_error<DataError>([&] { ShardReader::open(path); }, "unknown format version 9");
}

TEST(Shard, Truncated) {
  ScratchDir dir;
  const std::string path = write_sample(dir);
  const std::string b = read_bytes(path);
  write_bytes(path, b.substr(0, b.size() - 4));
  expect_error<DataError>([&] { ShardReader::open(path); }, "truncated");
  write_bytes(path, b.substr(0, 20));
  expect_error<DataError>([&] { ShardReader::open(path); }, "truncated");
  write_bytes(path, b.substr(0, 70));
  expect_error<DataError>([&] { ShardReader::open(path); }, "truncated");
  write_bytes(path, b + "junk0000");
  expect_error<DataError>([&] { ShardReader::open(path); }, "trailing");
}

TEST(Shard, HugeCountsDoNotOverflow) {
  ScratchDir dir;
  const std::string path = write_sample(dir);
  std::string b = read_bytes(path);
  const uint64_t huge = ~uint64_t(0) / 2 + 3;
  std::memcpy(b.data() + offsetof(ShardHeader, num_tokens), &huge, 8);
  write_bytes(path, b);
  expect_error<DataError>([&] { ShardReader::open(path); }, "truncated");
  b = read_bytes(dir / "s.bin");
  std::memcpy(b.data() + offsetof(ShardHeader, num_documents), &huge, 8);
  write_bytes(path, b);
  expect_error<DataError>([&] { ShardReader::open(path); }, "truncated");
}

TEST(Shard, ChecksumMismatch) {
  ScratchDir dir;
  const std::string path = write_sample(dir);
  std::string b = read_bytes(path);
  ShardHeader h;
  std::memcpy(&h, b.data(), sizeof(h));
  b[h.index_offset + 8] ^= 1;  // index entry 1
  write_bytes(path, b);
  expect_error<DataError>([&] { ShardReader::open(path); }, "checksum");
}

TEST(Shard, IndexNotMonotonic) {
  ScratchDir dir;
  const std::string path = write_sample(dir);
  std::string b = read_bytes(path);
  ShardHeader h;
  std::memcpy(&h, b.data(), sizeof(h));
  const uint64_t bad = 12;  // index becomes 0, 12, 8, 15
  std::memcpy(b.data() + h.index_offset + 8, &bad, 8);
  fix_checksum(b);
  write_bytes(path, b);
  expect_error<DataError>([&] { ShardReader::open(path); }, "not monotonic at document 1");
}

TEST(Shard, TokenIdOutsideVocab) {
  ScratchDir dir;
  const std::string path = write_sample(dir);
  std::string b = read_bytes(path);
  const uint16_t bad = 300;
  std::memcpy(b.data() + kShardHeaderBytes + 2 * 6, &bad, 2);  // token 6 = document 1
  write_bytes(path, b);
  expect_error<DataError>([&] { ShardReader::open(path); }, "token id 300 at position 6 (document 1)");
}

TEST(Shard, MissingFile) {
  ScratchDir dir;
  expect_error<DataError>([&] { ShardReader::open(dir / "nope.bin"); }, "nope.bin");
}

}  // namespace
}  // namespace meshtrain::data
