// `meshtrain data` argument handling and the prepare -> inspect -> batches
// path end to end on a fortune-style corpus.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/loader.h"

namespace meshtrain::data {
namespace {

using testing::expect_error;
using testing::ScratchDir;
using testing::write_text;

TEST(DataCommand, PrepareInspectAndLoad) {
  ScratchDir dir;
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += "Fortune " + std::to_string(i) + ": you will write tests.\n%\n";
  write_text(dir / "fortunes/demo", corpus);
  write_text(dir / "fortunes/demo.dat", "xx");
  ASSERT_EQ(cli::cmd_data({"prepare", "--out", dir / "ds", "--val-fraction=0.1", "--seed", "5", dir / "fortunes"}), 0);
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli::cmd_data({"inspect", dir / "ds"}), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("unigram entropy"), std::string::npos) << out;

  const TokenDataset train = TokenDataset::open(dir / "ds", "train");
  const TokenDataset val = TokenDataset::open(dir / "ds", "val");
  EXPECT_EQ(train.num_documents() + val.num_documents(), 40);
  EXPECT_GE(val.num_documents(), 1);
  LoaderConfig c;
  c.seq_len = 32;
  BatchLoader loader(train, c);
  Batch b;
  ASSERT_TRUE(loader.next(4, &b));
  EXPECT_EQ(b.supervised_targets, 4 * 32);
  // Decoding a row's inputs gives fortune text.
  const std::vector<int32_t> first(b.tokens.begin(), b.tokens.begin() + 32);
  EXPECT_NE(train.tokenizer().decode(first).find("ortune"), std::string::npos);
}

TEST(DataCommand, StrictArguments) {
  ScratchDir dir;
  write_text(dir / "a.txt", "text");
  expect_error<ConfigError>([&] { cli::cmd_data({"prepare", "--out", dir / "o", "--bogus", dir / "a.txt"}); },
                            "unknown flag '--bogus'");
  expect_error<ConfigError>([&] { cli::cmd_data({"prepare", "--out", dir / "o", "--seed", "x1", dir / "a.txt"}); },
                            "--seed expects a number");
  expect_error<ConfigError>([&] { cli::cmd_data({"prepare", "--out", dir / "o"}); }, "usage:");
  expect_error<ConfigError>([&] { cli::cmd_data({"prepare", dir / "a.txt"}); }, "--out");
  expect_error<ConfigError>([&] { cli::cmd_data({"prepare", "--format", "csv", "--out", dir / "o", dir / "a.txt"}); },
                            "unknown input format");
  expect_error<ConfigError>([&] { cli::cmd_data({"frobnicate"}); }, "unknown subcommand");
  expect_error<ConfigError>([&] { cli::cmd_data({}); }, "usage:");
  expect_error<DataError>([&] { cli::cmd_data({"inspect", dir / "nothing"}); }, "meta.json");
  EXPECT_EQ(dir.count_entries(), 1);
}

}  // namespace
}  // namespace meshtrain::data
