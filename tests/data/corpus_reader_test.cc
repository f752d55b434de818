// corpus_reader.h: format names, input expansion (directory order, hidden
// files, strfile companions), format detection and document splitting for
// text, JSONL and fortune files (CRLF, trailing '%'), and the errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data_test_util.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/corpus_reader.h"

namespace meshtrain::data {
namespace {

using testing::expect_error;
using testing::ScratchDir;
using testing::write_text;

std::vector<std::string> documents(const std::string& path, InputFormat f, int64_t* count = nullptr) {
  std::vector<std::string> docs;
  const int64_t n = for_each_document({path, f}, [&](std::string_view d) { docs.emplace_back(d); });
  EXPECT_EQ(n, int64_t(docs.size()));
  if (count) *count = n;
  return docs;
}

TEST(CorpusReader, FormatNamesRoundTripAndUnknownIsAConfigError) {
  for (InputFormat f : {InputFormat::Auto, InputFormat::Text, InputFormat::Jsonl, InputFormat::Fortune})
    EXPECT_EQ(parse_input_format(input_format_name(f)), f);
  EXPECT_STREQ(input_format_name(InputFormat::Jsonl), "jsonl");
  EXPECT_STREQ(input_format_name(InputFormat::Fortune), "fortune");
  expect_error<ConfigError>([] { parse_input_format("csv"); }, "unknown input format 'csv'");
  expect_error<ConfigError>([] { parse_input_format("Text"); }, "use auto, text, jsonl or fortune");
  expect_error<ConfigError>([] { parse_input_format(""); }, "unknown input format");
}

TEST(CorpusReader, DetectFormat) {
  EXPECT_EQ(detect_format("a.jsonl", "plain words"), InputFormat::Jsonl);
  EXPECT_EQ(detect_format("a", "%\nfirst"), InputFormat::Fortune);
  EXPECT_EQ(detect_format("a", "one\n%\ntwo"), InputFormat::Fortune);
  EXPECT_EQ(detect_format("a", "one\r\n%\r\ntwo"), InputFormat::Fortune);
  EXPECT_EQ(detect_format("a", "100%\nsure % of it\n"), InputFormat::Text);
  EXPECT_EQ(detect_format("a.json", "{\"text\": \"x\"}\n"), InputFormat::Text);
  EXPECT_EQ(detect_format("a", ""), InputFormat::Text);
}

TEST(CorpusReader, ExpandDirectorySortedSkippingHiddenAndStrfileCompanions) {
  ScratchDir dir;
  write_text(dir / "corpus/b.txt", "bee");
  write_text(dir / "corpus/a.txt", "ay");
  write_text(dir / "corpus/sub/c.jsonl", "{\"text\": \"sea\"}\n");
  write_text(dir / "corpus/.hidden", "secret");
  write_text(dir / "corpus/fort", "one\n%\ntwo\n");
  write_text(dir / "corpus/fort.dat", "offsets");  // strfile companions of "fort"
  write_text(dir / "corpus/fort.u8", "link");
  write_text(dir / "corpus/lone.dat", "no companion");  // kept: no "lone" beside it
  write_text(dir / "single.txt", "given first");

  const auto files = expand_inputs({dir / "single.txt", dir / "corpus"}, InputFormat::Auto);
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(f.path);
  EXPECT_EQ(paths, (std::vector<std::string>{dir / "single.txt", dir / "corpus/a.txt", dir / "corpus/b.txt",
                                             dir / "corpus/fort", dir / "corpus/lone.dat",
                                             dir / "corpus/sub/c.jsonl"}));
  ASSERT_EQ(files.size(), 6u);
  EXPECT_EQ(files[0].format, InputFormat::Text);
  EXPECT_EQ(files[3].format, InputFormat::Fortune);
  EXPECT_EQ(files[4].format, InputFormat::Text);
  EXPECT_EQ(files[5].format, InputFormat::Jsonl);

  // An explicit format applies to every file, never Auto.
  for (const auto& f : expand_inputs({dir / "corpus"}, InputFormat::Text)) EXPECT_EQ(f.format, InputFormat::Text);
}

TEST(CorpusReader, ExpandErrors) {
  ScratchDir dir;
  expect_error<DataError>([&] { expand_inputs({}, InputFormat::Auto); }, "no input paths");
  expect_error<DataError>([&] { expand_inputs({dir / "missing.txt"}, InputFormat::Auto); }, "does not exist");
  std::filesystem::create_directories(dir / "empty");
  write_text(dir / "empty/.only_hidden", "x");
  expect_error<DataError>([&] { expand_inputs({dir / "empty"}, InputFormat::Auto); }, "holds no files");
}

TEST(CorpusReader, TextFileIsOneDocumentVerbatim) {
  ScratchDir dir;
  const std::string body = "line one\r\nline two\n%\n\n";  // no splitting in text mode
  write_text(dir / "a.txt", body);
  EXPECT_EQ(documents(dir / "a.txt", InputFormat::Text), (std::vector<std::string>{body}));
  write_text(dir / "blank.txt", " \n\t\r\n");
  int64_t n = -1;
  EXPECT_TRUE(documents(dir / "blank.txt", InputFormat::Text, &n).empty());
  EXPECT_EQ(n, 0);
}

TEST(CorpusReader, JsonlTextFieldsWithCrlfAndBlankLines) {
  ScratchDir dir;
  write_text(dir / "d.jsonl",
             "{\"text\": \"one\", \"id\": 1}\r\n"
             "\r\n"
             "{\"text\": \"two\\nlines \\u00e9\"}\r\n"
             "{\"text\": \"   \"}\n"  // whitespace-only: skipped
             "{\"text\": \"last\"}");  // no final newline
  EXPECT_EQ(documents(dir / "d.jsonl", InputFormat::Jsonl),
            (std::vector<std::string>{"one", "two\nlines \xc3\xa9", "last"}));
}

TEST(CorpusReader, JsonlErrorsNameFileAndLine) {
  ScratchDir dir;
  write_text(dir / "bad.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"unterminated}\n");
  expect_error<DataError>([&] { documents(dir / "bad.jsonl", InputFormat::Jsonl); },
                          dir / "bad.jsonl" + ":3: invalid JSON");
  write_text(dir / "field.jsonl", "{\"body\": \"x\"}\n");
  expect_error<DataError>([&] { documents(dir / "field.jsonl", InputFormat::Jsonl); },
                          ":1: expected a JSON object with a string \"text\" field");
  write_text(dir / "type.jsonl", "{\"text\": \"a\"}\n{\"text\": 5}\n");
  expect_error<DataError>([&] { documents(dir / "type.jsonl", InputFormat::Jsonl); }, "type.jsonl:2:");
  write_text(dir / "array.jsonl", "[\"text\"]\n");
  expect_error<DataError>([&] { documents(dir / "array.jsonl", InputFormat::Jsonl); }, "expected a JSON object");
}

TEST(CorpusReader, FortuneSplitsOnPercentLines) {
  ScratchDir dir;
  write_text(dir / "f", "one\n%\ntwo\nlines\n%\n\n%\n50% off\n%%\nthree");
  EXPECT_EQ(documents(dir / "f", InputFormat::Fortune),
            (std::vector<std::string>{"one\n", "two\nlines\n", "50% off\n%%\nthree"}));
}

TEST(CorpusReader, FortuneWithTrailingPercentAndCrlf) {
  ScratchDir dir;
  write_text(dir / "trailing", "%\na\n%\nb\n%");  // leading separator, final '%' without newline
  EXPECT_EQ(documents(dir / "trailing", InputFormat::Fortune), (std::vector<std::string>{"a\n", "b\n"}));
  write_text(dir / "crlf", "a\r\nstill a\r\n%\r\nb\r\n%\r\n");
  EXPECT_EQ(documents(dir / "crlf", InputFormat::Fortune), (std::vector<std::string>{"a\r\nstill a\r\n", "b\r\n"}));
  write_text(dir / "only", "%\n%\n  \n%\n");
  int64_t n = -1;
  EXPECT_TRUE(documents(dir / "only", InputFormat::Fortune, &n).empty());
  EXPECT_EQ(n, 0);
}

// Inputs that never end or lead back to themselves are refused by name
// (no endless read of /dev/zero, no raw ELOOP with a path of links).
TEST(CorpusReader, DevicesAndLoopsOfLinksAreRefusedByName) {
  ScratchDir dir;
  expect_error<DataError>([&] { expand_inputs({"/dev/zero"}, InputFormat::Auto); },
                          "input path /dev/zero is a character device, not a file");
  write_text(dir / "d/a.txt", "a document");
  std::filesystem::create_directory_symlink(".", dir / "d/self");
  expect_error<DataError>([&] { expand_inputs({dir / "d"}, InputFormat::Auto); },
                          "input directory " + dir / "d/self is " + dir / "d again, reached through a symbolic link");
  std::filesystem::remove(dir / "d/self");
  std::filesystem::create_symlink(dir / "d/l2", dir / "d/l1");
  std::filesystem::create_symlink(dir / "d/l1", dir / "d/l2");
  expect_error<DataError>([&] { expand_inputs({dir / "d"}, InputFormat::Auto); },
                          "(symbolic links that lead to each other)");
  expect_error<DataError>([&] { expand_inputs({dir / "d/l1"}, InputFormat::Auto); },
                          "input path " + dir / "d/l1: ");
  // A link to a directory elsewhere is followed as before.
  std::filesystem::remove(dir / "d/l1");
  std::filesystem::remove(dir / "d/l2");
  write_text(dir / "other/b.txt", "another document");
  std::filesystem::create_directory_symlink(dir / "other", dir / "d/link");
  EXPECT_EQ(expand_inputs({dir / "d"}, InputFormat::Auto).size(), 2u);
}

// Detection reads a file block by block: a fortune separator past the
// first block is found, one across two blocks too.
TEST(CorpusReader, DetectFileFormatStreams) {
  ScratchDir dir;
  std::string text((size_t(1) << 20) - 2, 'x');
  write_text(dir / "plain", text);
  EXPECT_EQ(detect_file_format(dir / "plain"), InputFormat::Text);
  write_text(dir / "late", text + "\n%\nnext");  // "\n%\n" straddles the first block's end
  EXPECT_EQ(detect_file_format(dir / "late"), InputFormat::Fortune);
  write_text(dir / "first", "%\nonly");
  EXPECT_EQ(detect_file_format(dir / "first"), InputFormat::Fortune);
  EXPECT_EQ(detect_file_format(dir / "a.jsonl"), InputFormat::Jsonl);
}

TEST(CorpusReader, ReadErrors) {
  ScratchDir dir;
  expect_error<DataError>([&] { read_file(dir / "nope"); }, "cannot read " + dir / "nope");
  expect_error<DataError>([&] { documents(dir / "nope", InputFormat::Text); }, "nope");
  expect_error<DataError>([&] { documents(dir / "nope.jsonl", InputFormat::Jsonl); }, "cannot read");
  write_text(dir / "x", "abc");
  EXPECT_EQ(read_file(dir / "x"), "abc");
}

}  // namespace
}  // namespace meshtrain::data
