// Hand-built packing and padding cases: every array and count checked.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/data/loader.h"

namespace meshtrain::data {
namespace {

using V = std::vector<int32_t>;
constexpr int32_t B = 256, E = 257, P = 258;

V row(const std::vector<int32_t>& all, int64_t r, int64_t seq) {
  return V(all.begin() + r * seq, all.begin() + (r + 1) * seq);
}

TokenDataset abc() {
  return TokenDataset::from_documents({{B, 1, 2, 3, E}, {B, 4, 5, E}, {B, 6, E}});
}

LoaderConfig in_order(BatchMode mode, int64_t seq) {
  LoaderConfig c;
  c.mode = mode;
  c.seq_len = seq;
  c.shuffle = false;
  c.bucket_pool = 1;
  return c;
}

TEST(Packing, RowsPositionsSegmentsTargets) {
  BatchLoader loader(abc(), in_order(BatchMode::Packed, 6));
  Batch b;
  ASSERT_TRUE(loader.next(2, &b));
  ASSERT_EQ(b.rows, 2);
  ASSERT_EQ(b.seq, 6);
  // Row 0: A (4 pairs) then the first 2 pairs of B.
  EXPECT_EQ(row(b.tokens, 0, 6), (V{B, 1, 2, 3, B, 4}));
  EXPECT_EQ(row(b.targets, 0, 6), (V{1, 2, 3, E, 4, 5}));
  EXPECT_EQ(row(b.positions, 0, 6), (V{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(row(b.segments, 0, 6), (V{0, 0, 0, 0, 1, 1}));
  // The last input of A predicts A's own EOS, never B's BOS: the first
  // target of B (4) is predicted from B's BOS at position 0 of its segment.
  EXPECT_NE(b.targets[3], B);
  // Row 1: the rest of B (positions restart, own segment), C, then A again
  // (next epoch) cut to fit.
  EXPECT_EQ(row(b.tokens, 1, 6), (V{5, B, 6, B, 1, 2}));
  EXPECT_EQ(row(b.targets, 1, 6), (V{E, 6, E, 1, 2, 3}));
  EXPECT_EQ(row(b.positions, 1, 6), (V{0, 0, 1, 0, 1, 2}));
  EXPECT_EQ(row(b.segments, 1, 6), (V{0, 1, 1, 2, 2, 2}));
  EXPECT_EQ(b.non_pad_tokens, 12);
  EXPECT_EQ(b.computed_positions, 12);
  EXPECT_EQ(b.supervised_targets, 12);
  EXPECT_DOUBLE_EQ(b.padding_ratio(), 0.0);
  EXPECT_EQ(loader.state().carry, (PackCarry{0, 3}));
}

TEST(Packing, FiniteStreamPadsTheTail) {
  BatchLoader loader(abc(), LoaderConfig::validation(BatchMode::Packed, 6));
  Batch b;
  ASSERT_TRUE(loader.next(3, &b));
  ASSERT_EQ(b.rows, 2);  // only two rows hold data
  EXPECT_EQ(row(b.tokens, 1, 6), (V{5, B, 6, P, P, P}));
  EXPECT_EQ(row(b.targets, 1, 6), (V{E, 6, E, -1, -1, -1}));
  EXPECT_EQ(row(b.segments, 1, 6), (V{0, 1, 1, 2, 2, 2}));  // padding: its own segment
  EXPECT_EQ(b.row_lengths, (V{6, 3}));
  EXPECT_EQ(b.non_pad_tokens, 9);
  EXPECT_EQ(b.computed_positions, 12);
  EXPECT_EQ(b.supervised_targets, 9);
  EXPECT_DOUBLE_EQ(b.padding_ratio(), 1.0 - 9.0 / 12.0);  // docs/math.md (M.2)
  EXPECT_FALSE(loader.next(3, &b));
  EXPECT_EQ(b.rows, 0);
}

TEST(Packing, LongDocumentSplitsAcrossRows) {
  V doc{B};
  for (int i = 0; i < 20; ++i) doc.push_back(i);
  doc.push_back(E);  // 22 tokens, 21 pairs
  BatchLoader loader(TokenDataset::from_documents({doc}), LoaderConfig::validation(BatchMode::Packed, 8));
  Batch b;
  ASSERT_TRUE(loader.next(4, &b));
  ASSERT_EQ(b.rows, 3);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < 8; ++i) {
      const int64_t k = r * 8 + i;
      if (k >= 21) {
        EXPECT_EQ(b.targets[size_t(k)], -1);
        continue;
      }
      EXPECT_EQ(b.tokens[size_t(k)], doc[size_t(k)]);
      EXPECT_EQ(b.targets[size_t(k)], doc[size_t(k + 1)]);  // same document, across the row cut
      EXPECT_EQ(b.positions[size_t(k)], i);                  // restart per row piece
      EXPECT_EQ(b.segments[size_t(k)], 0);
    }
  EXPECT_EQ(b.supervised_targets, 21);
}

TEST(Padded, OneDocumentPerRowPaddedToLongest) {
  V long_doc{B};
  for (int i = 0; i < 30; ++i) long_doc.push_back(i);
  long_doc.push_back(E);
  BatchLoader loader(TokenDataset::from_documents({{B, 1, 2, 3, E}, {B, 6, E}, long_doc}),
                     in_order(BatchMode::Padded, 8));
  Batch b;
  ASSERT_TRUE(loader.next(2, &b));
  ASSERT_EQ(b.rows, 2);
  ASSERT_EQ(b.seq, 4);  // l_max of this batch, not seq_len
  // Within a window rows are sorted by length: C (2 pairs) then A (4).
  EXPECT_EQ(row(b.tokens, 0, 4), (V{B, 6, P, P}));
  EXPECT_EQ(row(b.targets, 0, 4), (V{6, E, -1, -1}));
  EXPECT_EQ(row(b.segments, 0, 4), (V{0, 0, 1, 1}));
  EXPECT_EQ(row(b.tokens, 1, 4), (V{B, 1, 2, 3}));
  EXPECT_EQ(row(b.targets, 1, 4), (V{1, 2, 3, E}));
  EXPECT_EQ(row(b.positions, 1, 4), (V{0, 1, 2, 3}));
  EXPECT_EQ(b.non_pad_tokens, 6);
  EXPECT_EQ(b.computed_positions, 8);
  EXPECT_EQ(b.supervised_targets, 6);
  EXPECT_DOUBLE_EQ(b.padding_ratio(), 1.0 - 6.0 / 8.0);
  // The long document is truncated to seq_len + 1 tokens.
  ASSERT_TRUE(loader.next(2, &b));
  EXPECT_EQ(b.seq, 8);
  EXPECT_EQ(row(b.tokens, 1, 8), (V{B, 0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(row(b.targets, 1, 8), (V{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(b.row_lengths, (V{4, 8}));
}

TEST(Batch, PaddingRatioAndReuse) {
  Batch b;
  EXPECT_DOUBLE_EQ(b.padding_ratio(), 0.0);
  b.reset(4, 10, P);
  b.row_lengths = {10, 5, 3, 2};
  b.recount();
  EXPECT_EQ(b.computed_positions, 40);
  EXPECT_DOUBLE_EQ(b.padding_ratio(), 1.0 - 20.0 / 40.0);  // docs/math.md (M.2)
  const int32_t* p = b.tokens.data();
  b.reset(3, 10, P);
  EXPECT_EQ(b.tokens.data(), p);  // no reallocation when not growing
}

}  // namespace
}  // namespace meshtrain::data
