#include "meshtrain/data/tokenizer.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"

namespace meshtrain::data {
namespace {

TEST(ByteTokenizer, RoundTripsAllBytes) {
  ByteTokenizer tok;
  std::string text;
  for (int c = 0; c < 256; ++c) text.push_back(char(c));
  text += "héllo wörld \n\t%";
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 256);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(ByteTokenizer, SpecialTokens) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.eos_id(), 257);
  EXPECT_EQ(tok.pad_id(), 258);
  const auto doc = tok.encode_document("ab");
  EXPECT_EQ(doc, (std::vector<int32_t>{256, 'a', 'b', 257}));
  EXPECT_EQ(tok.decode(doc), "ab");  // specials are dropped
  const std::vector<int32_t> bad{'a', 259};
  EXPECT_THROW(tok.decode(bad), DataError);
}

TEST(ByteTokenizer, DescribeRebuilds) {
  ByteTokenizer tok;
  auto again = make_tokenizer(tok.describe());
  EXPECT_EQ(again->describe(), tok.describe());
  EXPECT_EQ(again->vocab_size(), 259);
  EXPECT_THROW(make_tokenizer({{"type", "bpe9000"}}), DataError);
  auto wrong = tok.describe();
  wrong["eos_id"] = 1;
  EXPECT_THROW(make_tokenizer(wrong), DataError);
}

}  // namespace
}  // namespace meshtrain::data
