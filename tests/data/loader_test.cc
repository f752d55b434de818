// Window API (R*G*B fixed -> same rows), exact resume, bucketing, validation.
#include "meshtrain/data/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::data {
namespace {

// Documents of varied lengths with distinctive contents.
TokenDataset random_docs(int n, uint64_t seed, int max_len = 40) {
  CounterRng rng(seed);
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < n; ++d) {
    const auto b = rng.bits(1, uint64_t(d));
    std::vector<int32_t> doc{256};
    const int len = 1 + int(b[0] % uint32_t(max_len));
    for (int i = 0; i < len; ++i) doc.push_back(int32_t(rng.bits(2, uint64_t(d) * 1000 + i)[0] % 256));
    doc.push_back(257);
    docs.push_back(doc);
  }
  return TokenDataset::from_documents(docs);
}

using Row = std::vector<int32_t>;  // tokens ++ targets ++ positions ++ segments of one row

void append_rows(const Batch& b, std::vector<Row>* out) {
  for (int64_t r = 0; r < b.rows; ++r) {
    Row row;
    for (const auto* v : {&b.tokens, &b.targets, &b.positions, &b.segments})
      row.insert(row.end(), v->begin() + r * b.seq, v->begin() + (r + 1) * b.seq);
    out->push_back(row);
  }
}

LoaderConfig cfg(BatchMode mode) {
  LoaderConfig c;
  c.mode = mode;
  c.seq_len = 16;
  c.seed = 42;
  c.bucket_pool = 4;
  return c;
}

class WindowTest : public ::testing::TestWithParam<BatchMode> {};

TEST_P(WindowTest, SameRowsForAnyReplicasAndMicroBatches) {
  const TokenDataset ds = random_docs(57, 1);
  constexpr int64_t kW = 12, kSteps = 9;
  // Reference: a single rank reading whole windows.
  std::vector<Row> ref;
  std::vector<int64_t> ref_seq, ref_n;
  {
    BatchLoader l(ds, cfg(GetParam()));
    Batch b;
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_TRUE(l.next(kW, &b));
      append_rows(b, &ref);
      ref_seq.push_back(b.seq);
      ref_n.push_back(l.window().supervised_targets());
      EXPECT_EQ(b.supervised_targets, l.window().supervised_targets());
      EXPECT_EQ(b.computed_positions, l.window().computed_positions());
    }
  }
  for (auto [R, G] : {std::pair<int64_t, int64_t>{2, 3}, {3, 2}, {4, 1}, {6, 2}, {12, 1}, {1, 4}}) {
    const int64_t Bm = kW / (R * G);
    std::vector<BatchLoader> replicas(size_t(R), BatchLoader(ds, cfg(GetParam())));
    std::vector<Row> got;
    Batch part, micro;
    for (int s = 0; s < kSteps; ++s) {
      int64_t n_total = 0;
      for (int64_t r = 0; r < R; ++r) {
        ASSERT_TRUE(replicas[size_t(r)].next_window(kW, r * G * Bm, G * Bm, &part));
        EXPECT_EQ(part.seq, ref_seq[size_t(s)]);  // padded: one l_max for the whole window
        for (int64_t j = 0; j < G; ++j) {
          part.copy_rows(j * Bm, Bm, &micro);
          append_rows(micro, &got);
          n_total += micro.supervised_targets;
        }
      }
      EXPECT_EQ(n_total, ref_n[size_t(s)]) << "N of docs/math.md (M.4) must not depend on the layout";
    }
    EXPECT_EQ(got, ref) << "R=" << R << " G=" << G;
  }
}

TEST_P(WindowTest, ResumeIsExact) {
  const TokenDataset ds = random_docs(45, 2);
  BatchLoader a(ds, cfg(GetParam()));
  Batch ba, bb;
  for (int s = 0; s < 7; ++s) a.next(5, &ba);  // mid-epoch, mid-document / mid-pool
  const std::string saved = nlohmann::json(a.state()).dump();
  BatchLoader b(ds, cfg(GetParam()));
  b.restore(nlohmann::json::parse(saved).get<LoaderState>());
  EXPECT_EQ(b.state(), a.state());
  for (int s = 0; s < 30; ++s) {
    ASSERT_TRUE(a.next(5, &ba));
    ASSERT_TRUE(b.next(5, &bb));
    std::vector<Row> ra, rb;
    append_rows(ba, &ra);
    append_rows(bb, &rb);
    ASSERT_EQ(ra, rb) << "window " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, WindowTest, ::testing::Values(BatchMode::Packed, BatchMode::Padded),
                         [](const auto& info) { return std::string(batch_mode_name(info.param)); });

TEST(Loader, StateJsonShapeAndForeignStates) {
  const TokenDataset ds = random_docs(20, 3);
  BatchLoader l(ds, cfg(BatchMode::Packed));
  Batch b;
  l.next(3, &b);
  const nlohmann::json j = l.state();
  EXPECT_EQ(j["mode"], "packed");
  EXPECT_EQ(j["seq_len"], 16);
  EXPECT_EQ(j["num_documents"], 20);
  EXPECT_EQ(j["sampler"]["seed"], 42);
  EXPECT_EQ(j["rows"], 3);
  EXPECT_TRUE(j["carry"].contains("offset"));
  BatchLoader padded(ds, cfg(BatchMode::Padded));
  EXPECT_THROW(padded.restore(l.state()), DataError);
  BatchLoader other(random_docs(21, 3), cfg(BatchMode::Packed));
  EXPECT_THROW(other.restore(l.state()), DataError);
  EXPECT_THROW(nlohmann::json({{"version", 1}}).get<LoaderState>(), DataError);
}

TEST(Bucketing, SeqMultipleRoundsPaddedWindowsUpAndKeepsTheirRows) {
  // Sequence parallelism splits every row's positions over tp ranks: the
  // window's padded length becomes a multiple of tp, with the same rows,
  // the same supervision and only padding added.
  const TokenDataset ds = random_docs(40, 8, 13);
  LoaderConfig c4 = cfg(BatchMode::Padded);
  c4.seq_multiple = 4;
  BatchLoader plain(ds, cfg(BatchMode::Padded)), rounded(ds, c4);
  Batch a, b;
  bool rounded_up = false;
  for (int s = 0; s < 12; ++s) {
    plain.next(3, &a);
    rounded.next(3, &b);
    ASSERT_EQ(b.seq % 4, 0);
    ASSERT_GE(b.seq, a.seq);
    ASSERT_LT(b.seq - a.seq, 4);
    rounded_up = rounded_up || b.seq > a.seq;
    EXPECT_EQ(b.supervised_targets, a.supervised_targets);
    EXPECT_EQ(b.non_pad_tokens, a.non_pad_tokens);
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t i = 0; i < b.seq; ++i) {
        const bool pad = i >= a.seq;
        EXPECT_EQ(b.targets[size_t(b.at(r, i))], pad ? -1 : a.targets[size_t(a.at(r, i))]);
        if (!pad) {
          EXPECT_EQ(b.tokens[size_t(b.at(r, i))], a.tokens[size_t(a.at(r, i))]);
        }
      }
  }
  EXPECT_TRUE(rounded_up);
  c4.seq_len = 18;
  EXPECT_THROW(BatchLoader(ds, c4), ConfigError);
}

TEST(Loader, BatchStorageIsReused) {
  BatchLoader l(random_docs(30, 4), cfg(BatchMode::Packed));
  Batch b;
  l.next(8, &b);
  const int32_t* p[4] = {b.tokens.data(), b.targets.data(), b.positions.data(), b.segments.data()};
  for (int s = 0; s < 20; ++s) {
    l.next(8, &b);
    EXPECT_EQ(b.tokens.data(), p[0]);
    EXPECT_EQ(b.targets.data(), p[1]);
    EXPECT_EQ(b.positions.data(), p[2]);
    EXPECT_EQ(b.segments.data(), p[3]);
  }
}

TEST(Bucketing, GroupsLengthsKeepsRandomOrderAndCoversEpoch) {
  const TokenDataset ds = random_docs(128, 5, 60);
  LoaderConfig c = cfg(BatchMode::Padded);
  c.seq_len = 64;
  c.bucket_pool = 4;
  BatchLoader l(ds, c);
  Batch b;
  std::map<int64_t, int> seen;
  bool some_pool_unsorted = false;
  double bucketed_ratio = 0;
  for (int pool = 0; pool < 4; ++pool) {  // 4 pools x 4 windows x 8 rows = one epoch
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (min, max) row length per window
    for (int w = 0; w < 4; ++w) {
      ASSERT_TRUE(l.next(8, &b));
      const Window& win = l.window();
      int64_t lo = INT64_MAX, hi = 0, sum = 0;
      for (int64_t r = 0; r < win.rows(); ++r) {
        int64_t k = 0;
        ++seen[win.row_pieces(r, &k)->doc];
        lo = std::min(lo, win.row_length(r));
        hi = std::max(hi, win.row_length(r));
        sum += win.row_length(r);
      }
      EXPECT_EQ(b.seq, hi);
      EXPECT_EQ(b.computed_positions, 8 * hi);  // rows * l_max
      EXPECT_EQ(b.non_pad_tokens, sum);
      bucketed_ratio += b.padding_ratio() / 16;
      ranges.push_back({lo, hi});
    }
    // The pool's windows are consecutive ranges of its sorted lengths.
    auto sorted = ranges;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); ++i) EXPECT_LE(sorted[i - 1].second, sorted[i].first);
    some_pool_unsorted |= sorted != ranges;
  }
  EXPECT_TRUE(some_pool_unsorted) << "windows of a pool should come out in random order";
  EXPECT_EQ(seen.size(), 128u);  // every document exactly once in the epoch
  for (const auto& [doc, n] : seen) EXPECT_EQ(n, 1);
  // Bucketing must cut padding against unsorted windows of the same documents.
  LoaderConfig nb = c;
  nb.bucket_pool = 1;
  BatchLoader plain(ds, nb);
  double plain_ratio = 0;
  for (int w = 0; w < 16; ++w) {
    plain.next(8, &b);
    plain_ratio += b.padding_ratio() / 16;
  }
  EXPECT_LT(bucketed_ratio, plain_ratio);
}

TEST(Bucketing, WindowSizeChangeInsideAPoolIsRejected) {
  BatchLoader l(random_docs(64, 6), cfg(BatchMode::Padded));
  Batch b;
  l.next(4, &b);
  EXPECT_THROW(l.next(5, &b), ConfigError);
}

TEST(Validation, VisitsEverySplitTargetOnceInFixedOrder) {
  const TokenDataset ds = random_docs(33, 7);
  int64_t expect_targets = 0;
  for (int64_t d = 0; d < ds.num_documents(); ++d) expect_targets += ds.document_length(d) - 1;
  for (BatchMode mode : {BatchMode::Packed, BatchMode::Padded}) {
    std::vector<Row> first, second;
    for (auto* rows : {&first, &second}) {
      ValidationIterator it(ds, mode, 16);
      Batch b;
      int64_t targets = 0;
      while (it.next(4, &b)) {
        targets += b.supervised_targets;
        append_rows(b, rows);
      }
      // Padded rows are truncated to seq_len + 1 tokens; packed rows lose nothing.
      if (mode == BatchMode::Packed) {
        EXPECT_EQ(targets, expect_targets);
      } else {
        EXPECT_EQ(int64_t(rows->size()), ds.num_documents());
      }
    }
    EXPECT_EQ(first, second);
  }
}

TEST(Loader, RejectsUselessSplits) {
  EXPECT_THROW(BatchLoader(TokenDataset::from_documents({{256}, {257}}), cfg(BatchMode::Packed)), DataError);
  LoaderConfig bad = cfg(BatchMode::Packed);
  bad.seq_len = 0;
  EXPECT_THROW(BatchLoader(random_docs(3, 1), bad), ConfigError);
}

}  // namespace
}  // namespace meshtrain::data
