// Raw corpus input for `data prepare`: expands paths into files, detects each
// file's format and yields its documents as text.
//   text     a whole file is one document
//   jsonl    one JSON object per line; its "text" field is a document
//   fortune  documents separated by lines holding only '%'
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::data {

enum class InputFormat { Auto, Text, Jsonl, Fortune };
const char* input_format_name(InputFormat f);
InputFormat parse_input_format(std::string_view name);  // ConfigError on unknown names

struct SourceFile {
  std::string path;
  InputFormat format;  // never Auto after expand_inputs
};

// Files in order: each input as given; a directory expands to its regular
// files recursively in sorted order, skipping hidden files and the strfile
// companions NAME.dat / NAME.u8 of a NAME in the same directory. With
// format Auto each file is detected: ".jsonl" extension -> jsonl; content
// starting with "%\n" or containing "\n%\n" -> fortune; else text.
// DataError for a missing or unreadable path, an input that is not a
// regular file or directory (/dev/zero, a pipe), and a directory reached
// again through a symbolic link (a loop), naming the link.
std::vector<SourceFile> expand_inputs(const std::vector<std::string>& inputs, InputFormat format);

InputFormat detect_format(const std::string& path, std::string_view content);
// The same rule over a file, read block by block (never held whole).
InputFormat detect_file_format(const std::string& path);

// Calls fn for each document of the file in order and returns their count.
// Documents that are empty or whitespace-only are skipped. A malformed JSONL
// line is a DataError naming file:line.
int64_t for_each_document(const SourceFile& src, const std::function<void(std::string_view)>& fn);

// Whole file as a string (DataError naming the file on failure).
std::string read_file(const std::string& path);

}  // namespace meshtrain::data
