// Covers src/meshtrain/data/prepare_output.cc (what --out may replace, stale temp directories).
// What `data prepare` may replace and what it leaves behind: --overwrite
// replaces only a prepared dataset and never touches an input, names must
// be UTF-8, a killed prepare's temporary directory (half-written shards
// included) is removed by the next one, memory stays near one input's size,
// and a shard whose bytes changed after preparation is refused.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/resource.h>
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

// A prepare killed while writing leaves its shards' own temporary files
// (train.bin.tmp.XXXXXX) in its directory: still its, still removed.
TEST(PrepareGuards, AKilledPreparesHalfWrittenShardsAreRemovedByTheNext) {
  ScratchDir dir;
  write_text(dir / "a.txt", "doc a");
  const std::string stale = dir / ("out.tmp." + std::to_string(dead_pid()) + ".Ab12Cd");
  write_text(stale + "/train.bin.tmp.Xy12Zw", std::string(65536, 'x'));
  write_text(stale + "/val.bin.tmp.Qr34St", std::string(4096, 'x'));
  const std::string foreign = dir / ("out.tmp." + std::to_string(dead_pid()) + ".Qq00Ww");
  write_text(foreign + "/train.bin.tmp.notours", "not a shard's temporary name");
  PrepareOptions o;
  o.inputs = {dir / "a.txt"};
  o.out_dir = dir / "out";
  prepare_dataset(o);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(foreign + "/train.bin.tmp.notours"));
}

// A prepare holds about one input file at a time (a text file is one
// document), never the ~9 times its size that whole-file reads, int32 ids
// and copies of them once took: measured as the peak resident memory of a
// child process preparing a 24 MiB text file.
TEST(PrepareGuards, MemoryStaysNearTheInputSize) {
  ScratchDir dir;
  constexpr size_t kBytes = size_t(24) << 20;
  {
    std::string text(kBytes, 'a');
    for (size_t i = 0; i < kBytes; i += 71) text[i] = '\n';
    write_text(dir / "big.txt", text);
  }
  struct rusage before {};
  ::getrusage(RUSAGE_SELF, &before);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    try {
      PrepareOptions o;
      o.inputs = {dir / "big.txt"};
      o.out_dir = dir / "out";
      prepare_dataset(o);
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  int status = 0;
  struct rusage usage {};
  ASSERT_EQ(::wait4(child, &status, 0, &usage), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the prepare failed";
  // ru_maxrss is in KiB; the child starts with this process's pages.
  const int64_t peak = int64_t(usage.ru_maxrss) * 1024, base = int64_t(before.ru_maxrss) * 1024;
  EXPECT_LT(peak, base + int64_t(2 * kBytes) + (int64_t(16) << 20))
      << "peak " << (peak >> 20) << " MiB for a " << (kBytes >> 20) << " MiB input (this process: " << (base >> 20)
      << " MiB)";
  EXPECT_EQ(TokenDataset::open(dir / "out", "train").num_tokens() + TokenDataset::open(dir / "out", "val").num_tokens(),
            int64_t(kBytes) + 2);
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
