// Covers src/meshtrain/data/prepare_output.cc (what --out may replace, stale temp directories).
// What `data prepare` may replace and what it leaves behind: --overwrite
// replaces only a prepared dataset and never touches an input, names must
// be UTF-8, a killed prepare's temporary directory is removed by the next
// one, and a shard whose bytes changed after preparation is refused.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data_test_util.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/dataset.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/data/shard_format.h"

namespace meshtrain::data {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::ScratchDir;
using testing::write_text;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

PrepareOptions overwrite_into(const std::string& out, std::vector<std::string> inputs) {
  PrepareOptions o;
  o.inputs = std::move(inputs);
  o.out_dir = out;
  o.overwrite = true;
  return o;
}

TEST(PrepareGuards, OverwriteNeverDestroysAnInput) {
  ScratchDir dir;
  write_text(dir / "corpus/a.txt", "the input");
  // --out is the input's own directory, or the input file itself.
  expect_error<DataError>([&] { prepare_dataset(overwrite_into(dir / "corpus", {dir / "corpus/a.txt"})); },
                          "is or contains the input");
  expect_error<DataError>([&] { prepare_dataset(overwrite_into(dir / "corpus/a.txt", {dir / "corpus/a.txt"})); },
                          "is or contains the input");
  EXPECT_EQ(read_all(dir / "corpus/a.txt"), "the input");
}

TEST(PrepareGuards, OverwriteReplacesOnlyAPreparedDataset) {
  ScratchDir dir;
  write_text(dir / "a.txt", "doc a");
  write_text(dir / "notes/todo.txt", "unrelated");
  write_text(dir / "plain.txt", "a regular file");
  expect_error<DataError>([&] { prepare_dataset(overwrite_into(dir / "notes", {dir / "a.txt"})); },
                          "holds 'todo.txt', which is not part of one");
  expect_error<DataError>([&] { prepare_dataset(overwrite_into(dir / "plain.txt", {dir / "a.txt"})); },
                          "is not a directory");
  EXPECT_EQ(read_all(dir / "notes/todo.txt"), "unrelated");
  EXPECT_EQ(read_all(dir / "plain.txt"), "a regular file");
  // A prepared dataset is replaced.
  EXPECT_EQ(prepare_dataset(overwrite_into(dir / "ds", {dir / "a.txt"})).documents, 1);
  write_text(dir / "b.txt", "doc b");
  EXPECT_EQ(prepare_dataset(overwrite_into(dir / "ds", {dir / "a.txt", dir / "b.txt"})).documents, 2);
}

TEST(PrepareGuards, NonUtf8NamesAreRefusedBeforeAnythingIsWritten) {
  ScratchDir dir;
  const std::string bad = dir / "bad\xff.txt";
  write_text(bad, "text");
  PrepareOptions o;
  o.inputs = {bad};
  o.out_dir = dir / "out";
  expect_error<DataError>([&] { prepare_dataset(o); }, "bad\\xff.txt' is not valid UTF-8");
  o.inputs = {dir / "ok.txt"};
  write_text(dir / "ok.txt", "text");
  o.out_dir = dir / "out\xfe";
  expect_error<DataError>([&] { prepare_dataset(o); }, "is not valid UTF-8");
  EXPECT_EQ(dir.count_entries(), 2);
}

// A pid that no longer runs: a child that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = -1;
  char arg0[] = "/bin/true";
  char* argv[] = {arg0, nullptr};
  EXPECT_EQ(posix_spawn(&pid, arg0, nullptr, nullptr, argv, nullptr), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST(PrepareGuards, AKilledPreparesTemporaryDirectoryIsRemovedByTheNext) {
  ScratchDir dir;
  write_text(dir / "a.txt", "doc a");
  const std::string stale = dir / ("out.tmp." + std::to_string(dead_pid()) + ".Ab12Cd");
  write_text(stale + "/train.bin", std::string(4096, 'x'));  // a half-written shard
  const std::string live = dir / ("out.tmp." + std::to_string(::getpid()) + ".Zz99Yy");
  write_text(live + "/train.bin", "in progress");  // a running prepare's (here: ours)
  const std::string foreign = dir / ("out.tmp." + std::to_string(dead_pid()) + ".Qq00Ww");
  write_text(foreign + "/thesis.tex", "not ours");  // matches the name, not the contents
  PrepareOptions o;
  o.inputs = {dir / "a.txt"};
  o.out_dir = dir / "out";
  prepare_dataset(o);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(foreign + "/thesis.tex"));
}

TEST(PrepareGuards, AFlippedTokenInsideTheVocabularyIsDetected) {
  ScratchDir dir;
  write_text(dir / "a.txt", "some text to tokenize, long enough");
  write_text(dir / "b.txt", "another document");
  PrepareOptions o;
  o.inputs = {dir / "a.txt", dir / "b.txt"};
  o.out_dir = dir / "out";
  o.val_fraction = 0.5;
  prepare_dataset(o);
  const std::string shard = dir / "out/train.bin";
  EXPECT_NO_THROW(TokenDataset::open(dir / "out", "train"));
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff pos = std::streamoff(kShardHeaderBytes) + 2;  // u16 token 1: a letter
    uint16_t id = 0;
    f.seekg(pos);
    f.read(reinterpret_cast<char*>(&id), 2);
    ASSERT_LT(id, 256);
    id ^= 1;  // still a byte: inside the vocabulary
    f.seekp(pos);
    f.write(reinterpret_cast<const char*>(&id), 2);
  }
  expect_error<DataError>([&] { TokenDataset::open(dir / "out", "train"); }, "hashes to SHA-256");
}

}  // namespace
}  // namespace meshtrain::data
