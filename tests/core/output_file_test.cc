// Covers src/meshtrain/core/output_file.cc.
// A user-named output is never one of the command's inputs, never replaced
// without being told to, never torn, and its temporary file is a fresh name
// (a user's X.tmp is never touched) that is removed when the write fails.
#include "meshtrain/core/output_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "support/test_dir.h"

namespace meshtrain {
namespace {

namespace fs = std::filesystem;

std::string text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = meshtrain::testing::fresh_test_dir("mt_output_");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string refusal(const fs::path& out, const std::vector<std::string>& inputs, bool replace) {
    try {
      check_output_file(out.string(), inputs, replace, "--force");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(OutputFile, InputsExistingFilesAndDirectoriesAreRefused) {
  std::ofstream(dir_ / "metrics.jsonl") << "{}\n";
  EXPECT_NE(refusal(dir_ / "metrics.jsonl", {(dir_ / "metrics.jsonl").string()}, true).find("is the input"),
            std::string::npos);
  // The same file by another path: a link to it.
  fs::create_symlink(dir_ / "metrics.jsonl", dir_ / "link.jsonl");
  EXPECT_NE(refusal(dir_ / "link.jsonl", {(dir_ / "metrics.jsonl").string()}, true).find("is the input"),
            std::string::npos);
  EXPECT_NE(refusal(dir_ / "metrics.jsonl", {}, false).find("already exists; pass --force"), std::string::npos);
  EXPECT_EQ(refusal(dir_ / "metrics.jsonl", {}, true), "");
  EXPECT_NE(refusal(dir_, {}, true).find("is a directory"), std::string::npos);
  EXPECT_EQ(refusal(dir_ / "new.html", {(dir_ / "metrics.jsonl").string()}, false), "");
}

TEST_F(OutputFile, WritesWholeThroughAFreshNameAndLeavesNothingOnFailure) {
  const fs::path out = dir_ / "report.html";
  std::ofstream(dir_ / "report.html.tmp") << "the user's own";
  write_file_atomically(out.string(), "first");
  write_file_atomically(out.string(), "second");
  EXPECT_EQ(text(out), "second");
  EXPECT_EQ(text(dir_ / "report.html.tmp"), "the user's own");
  // A write that cannot land (a directory in the way) fails and cleans up.
  fs::create_directories(dir_ / "blocked.html");
  std::ofstream(dir_ / "blocked.html" / "inside") << "x";
  EXPECT_THROW(write_file_atomically((dir_ / "blocked.html").string(), "content"), DataError);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
  }
  EXPECT_EQ(files, 3);  // report.html, report.html.tmp, blocked.html
}

}  // namespace
}  // namespace meshtrain
