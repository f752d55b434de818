#include "meshtrain/data/prepare.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "data_test_util.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/loader.h"

namespace meshtrain::data {
namespace {

using testing::expect_error;
using testing::ScratchDir;
using testing::write_text;

// Decoded documents of both splits, train first.
std::vector<std::string> all_docs(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* split : {"train", "val"}) {
    const TokenDataset ds = TokenDataset::open(dir, split);
    for (int64_t d = 0; d < ds.num_documents(); ++d) {
      const auto ids = ds.document(d).to_vector();
      EXPECT_EQ(ids.front(), ds.tokenizer().bos_id());
      EXPECT_EQ(ids.back(), ds.tokenizer().eos_id());
      out.push_back(ds.tokenizer().decode(ids));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Streams every split through packed validation batches and rebuilds the
// token stream from (input, target) pairs: it must equal the shard's tokens.
void expect_batches_round_trip(const std::string& dir) {
  for (const char* split : {"train", "val"}) {
    const TokenDataset ds = TokenDataset::open(dir, split);
    if (ds.num_documents() == 0) continue;
    std::vector<int32_t> rebuilt;
    ValidationIterator it(ds, BatchMode::Packed, 7);
    Batch b;
    while (it.next(3, &b)) {
      for (int64_t r = 0; r < b.rows; ++r)
        for (int64_t i = 0; i < b.row_lengths[size_t(r)]; ++i) {
          const int64_t k = b.at(r, i);
          if (b.tokens[size_t(k)] == ds.tokenizer().bos_id()) {
            EXPECT_EQ(b.positions[size_t(k)], 0);
          }
          rebuilt.push_back(b.tokens[size_t(k)]);
          if (b.targets[size_t(k)] == ds.tokenizer().eos_id()) rebuilt.push_back(b.targets[size_t(k)]);
        }
    }
    EXPECT_EQ(rebuilt, ds.all_tokens().to_vector()) << split;
  }
}

PrepareOptions opts_for(const ScratchDir& dir, std::vector<std::string> inputs) {
  PrepareOptions o;
  o.inputs = std::move(inputs);
  o.out_dir = dir / "out";
  return o;
}

TEST(Prepare, TextFilesAreOneDocumentEach) {
  ScratchDir dir;
  write_text(dir / "in/a.txt", "first document\nwith two lines\n");
  write_text(dir / "in/b.txt", "second");
  write_text(dir / "in/c.txt", "third one");
  const auto r = prepare_dataset(opts_for(dir, {dir / "in"}));
  EXPECT_EQ(r.source_files, 3);
  EXPECT_EQ(r.documents, 3);
  EXPECT_GE(r.train_documents, 1);
  EXPECT_GE(r.val_documents, 1);
  EXPECT_EQ(r.train_tokens + r.val_tokens, 30 + 6 + 9 + 3 * 2);
  EXPECT_EQ(all_docs(dir / "out"), (std::vector<std::string>{"first document\nwith two lines\n", "second", "third one"}));
  const auto meta = read_dataset_meta(dir / "out");
  EXPECT_EQ(meta["tokenizer"]["type"], "byte");
  EXPECT_EQ(meta["sources"].size(), 3u);
  EXPECT_EQ(meta["sources"][0]["format"], "text");
  EXPECT_EQ(meta["splits"]["train"]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(dir.count_entries(), 2);  // in/ and out/: no temp directory left
  expect_batches_round_trip(dir / "out");
}

TEST(Prepare, Jsonl) {
  ScratchDir dir;
  write_text(dir / "c.jsonl", "{\"text\": \"alpha\"}\n\n{\"text\": \"beta\", \"id\": 2}\n{\"text\": \"\"}\n{\"text\":\"gamma\\n\"}\n");
  const auto r = prepare_dataset(opts_for(dir, {dir / "c.jsonl"}));
  EXPECT_EQ(r.documents, 3);  // the empty text is skipped
  EXPECT_EQ(all_docs(dir / "out"), (std::vector<std::string>{"alpha", "beta", "gamma\n"}));
  EXPECT_EQ(read_dataset_meta(dir / "out")["sources"][0]["format"], "jsonl");
  expect_batches_round_trip(dir / "out");
}

TEST(Prepare, FortuneDetectedAndCompanionsSkipped) {
  ScratchDir dir;
  write_text(dir / "f/jokes", "one\nline two\n%\nthree\n%\n%\nfour\n");
  write_text(dir / "f/jokes.dat", "binary-ish index");
  write_text(dir / "f/jokes.u8", "one\n%\nduplicate\n");
  write_text(dir / "f/.hidden", "ignored");
  const auto r = prepare_dataset(opts_for(dir, {dir / "f"}));
  EXPECT_EQ(r.source_files, 1);
  EXPECT_EQ(r.documents, 3);
  EXPECT_EQ(all_docs(dir / "out"), (std::vector<std::string>{"four\n", "one\nline two\n", "three\n"}));
  EXPECT_EQ(read_dataset_meta(dir / "out")["sources"][0]["format"], "fortune");
  expect_batches_round_trip(dir / "out");
}

TEST(Prepare, ForcedFormat) {
  ScratchDir dir;
  write_text(dir / "f.txt", "a\n%\nb\n");
  auto o = opts_for(dir, {dir / "f.txt"});
  o.format = InputFormat::Text;
  EXPECT_EQ(prepare_dataset(o).documents, 1);
}

TEST(Prepare, SplitIsDeterministicAndSeeded) {
  const auto a = split_documents(1000, 7, 0.1);
  EXPECT_EQ(a, split_documents(1000, 7, 0.1));
  EXPECT_NE(a, split_documents(1000, 8, 0.1));
  const int64_t n_val = std::count(a.begin(), a.end(), 1);
  EXPECT_GT(n_val, 60);
  EXPECT_LT(n_val, 140);
  // Both splits non-empty whenever there are two documents.
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const auto s = split_documents(2, seed, 0.05);
    EXPECT_EQ(s[0] + s[1], 1);
    const auto t = split_documents(3, seed, 0.99);
    EXPECT_GE(std::count(t.begin(), t.end(), 0), 1);
  }
  EXPECT_EQ(split_documents(1, 0, 0.5).size(), 1u);
  EXPECT_THROW(split_documents(10, 0, 0.0), ConfigError);
}

TEST(Prepare, SameInputsGiveIdenticalShards) {
  ScratchDir dir;
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += "fortune number " + std::to_string(i) + "\n%\n";
  write_text(dir / "f", corpus);
  auto o = opts_for(dir, {dir / "f"});
  o.seed = 3;
  prepare_dataset(o);
  o.out_dir = dir / "out2";
  prepare_dataset(o);
  const auto m1 = read_dataset_meta(dir / "out"), m2 = read_dataset_meta(dir / "out2");
  EXPECT_EQ(m1["splits"], m2["splits"]);
  EXPECT_EQ(m1["documents"], 200);
  o.seed = 4;
  o.out_dir = dir / "out3";
  prepare_dataset(o);
  EXPECT_NE(read_dataset_meta(dir / "out3")["splits"]["val"]["sha256"], m1["splits"]["val"]["sha256"]);
}

TEST(Prepare, ExistingOutputNeedsOverwrite) {
  ScratchDir dir;
  write_text(dir / "a.txt", "doc a");
  write_text(dir / "b.txt", "doc b");
  auto o = opts_for(dir, {dir / "a.txt", dir / "b.txt"});
  prepare_dataset(o);
  expect_error<DataError>([&] { prepare_dataset(o); }, "already exists");
  o.overwrite = true;
  o.inputs = {dir / "a.txt"};
  EXPECT_EQ(prepare_dataset(o).documents, 1);
  EXPECT_EQ(dir.count_entries(), 3);  // a.txt b.txt out
}

TEST(PrepareErrors, MissingPath) {
  ScratchDir dir;
  expect_error<DataError>([&] { prepare_dataset(opts_for(dir, {dir / "no/such/corpus"})); }, "does not exist");
  EXPECT_EQ(dir.count_entries(), 0);
}

TEST(PrepareErrors, EmptyInput) {
  ScratchDir dir;
  write_text(dir / "empty.txt", "");
  write_text(dir / "blank.txt", " \n\n\t");
  expect_error<DataError>([&] { prepare_dataset(opts_for(dir, {dir / "empty.txt", dir / "blank.txt"})); },
                          "no documents");
  EXPECT_EQ(dir.count_entries(), 2);  // no out/, no temp dir
}

TEST(PrepareErrors, JsonlLineWithoutText) {
  ScratchDir dir;
  write_text(dir / "c.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  expect_error<DataError>([&] { prepare_dataset(opts_for(dir, {dir / "c.jsonl"})); }, "c.jsonl:2:");
  write_text(dir / "d.jsonl", "{\"text\": \"ok\"}\n{\"text\": 5}\n{not json\n");
  expect_error<DataError>([&] { prepare_dataset(opts_for(dir, {dir / "d.jsonl"})); }, "d.jsonl:2:");
  write_text(dir / "e.jsonl", "{\"text\": \"ok\"}\n{not json\n");
  expect_error<DataError>([&] { prepare_dataset(opts_for(dir, {dir / "e.jsonl"})); }, "e.jsonl:2: invalid JSON");
  EXPECT_EQ(dir.count_entries(), 3);
}

TEST(PrepareErrors, UnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can read anything";
  ScratchDir dir;
  write_text(dir / "secret.txt", "hidden");
  std::filesystem::permissions(dir / "secret.txt", std::filesystem::perms::none);
  expect_error<DataError>([&] { prepare_dataset(opts_for(dir, {dir / "secret.txt"})); }, "cannot read");
  EXPECT_EQ(dir.count_entries(), 1);
}

TEST(PrepareErrors, BadValFraction) {
  ScratchDir dir;
  write_text(dir / "a.txt", "x");
  auto o = opts_for(dir, {dir / "a.txt"});
  o.val_fraction = 1.5;
  EXPECT_THROW(prepare_dataset(o), ConfigError);
}

}  // namespace
}  // namespace meshtrain::data
