#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/safetensors.h"

namespace meshtrain::checkpoint {
namespace {

using testing::ScratchDir;
namespace fs = std::filesystem;

std::string file_bytes(const std::string& header, size_t data_bytes, uint64_t size_field = UINT64_MAX) {
  const uint64_t n = size_field == UINT64_MAX ? header.size() : size_field;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x01');
}

void expect_rejected(const std::string& bytes, const std::string& needle) {
  try {
    parse_safetensors_buffer(bytes.data(), bytes.size(), "test.safetensors");
    ADD_FAILURE() << "accepted; expected '" << needle << "'";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Safetensors, WriteThenReadRoundTripsWithMetadata) {
  ScratchDir dir;
  const std::vector<float> a = {1.5f, -2.f, 3.25f, 4.f, 5.f, 6.f};
  const std::vector<int64_t> b = {7, -8};
  const std::vector<bf16> c = {bf16(0.5f), bf16(-1.f), bf16(3.f)};
  const std::string path = (dir.path() / "m.safetensors").string();
  write_safetensors(path,
                    {{"a", DType::F32, Shape{2, 3}, a.data()}, {"b", DType::I64, Shape{2}, b.data()},
                     {"c", DType::BF16, Shape{3}, c.data()}},
                    {{"format", "pt"}});
  const SafetensorsReader r = SafetensorsReader::open(path);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.header().data_start % 8, 0u);
  EXPECT_EQ(r.read_f32("a"), a);
  std::vector<int64_t> b2(2);
  r.read("b", b2.data(), DType::I64);
  EXPECT_EQ(b2, b);
  EXPECT_EQ(r.read_f32("c"), (std::vector<float>{0.5f, -1.f, 3.f}));
  EXPECT_EQ(r.entry("a").shape, (Shape{2, 3}));
  EXPECT_THROW(r.entry("zzz"), CheckpointError);
}

TEST(Safetensors, MalformedFilesAreRejectedWithTheRuleThatFailed) {
  const std::string ok = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(parse_safetensors_buffer(file_bytes(ok, 8).data(), file_bytes(ok, 8).size(), "ok"));
  expect_rejected("1234", "shorter than the 8-byte header");
  expect_rejected(file_bytes(ok, 8, uint64_t(200) << 20), "exceeds the limit");
  expect_rejected(file_bytes(ok, 8, 4096), "exceeds the file");
  expect_rejected(file_bytes("{\"x\": \"\xff\xfe\"}", 0), "not valid UTF-8 JSON");
  expect_rejected(file_bytes("[1, 2]", 0), "not a JSON object");
  expect_rejected(file_bytes(R"({"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2), "unsupported dtype");
  expect_rejected(file_bytes(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "shape/bytes mismatch");
  expect_rejected(file_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "out of bounds");
  expect_rejected(file_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             12),
                  "overlap");
  expect_rejected(file_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "gap before");
  expect_rejected(file_bytes(ok, 12), "not contiguous to the end");
  expect_rejected(file_bytes(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative");
  expect_rejected(file_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", 8), "exactly");
  expect_rejected(file_bytes(R"({"__metadata__":{"k":1}})", 0), "is not a string");
}

TEST(Safetensors, ReaderRejectsTruncatedFileOnDisk) {
  ScratchDir dir;
  const std::vector<float> a(16, 1.f);
  const std::string path = (dir.path() / "t.safetensors").string();
  write_safetensors(path, {{"a", DType::F32, Shape{16}, a.data()}});
  fs::resize_file(path, fs::file_size(path) - 4);
  try {
    SafetensorsReader::open(path);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("out of bounds"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshtrain::checkpoint
