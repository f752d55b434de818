#include "meshtrain/data/corpus_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"

namespace meshtrain::data {
namespace fs = std::filesystem;
namespace {

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void expand_directory(const fs::path& dir, std::vector<std::string>* out) {
  std::vector<fs::path> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(it->path());
  MT_REQUIRE(DataError, !ec, "cannot list directory ", dir.string(), ": ", ec.message());
  std::sort(entries.begin(), entries.end());
  std::set<std::string> names;
  for (const auto& e : entries) names.insert(e.filename().string());
  for (const auto& e : entries) {
    const std::string name = e.filename().string();
    if (name.empty() || name[0] == '.') continue;
    // strfile(1) writes NAME.dat (offsets) and NAME.u8 (a link) next to NAME.
    if ((ends_with(name, ".dat") || ends_with(name, ".u8")) &&
        names.count(name.substr(0, name.rfind('.'))))
      continue;
    if (fs::is_directory(e)) {
      expand_directory(e, out);
    } else if (fs::is_regular_file(e)) {
      out->push_back(e.string());
    }
  }
}

}  // namespace

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::Auto: return "auto";
    case InputFormat::Text: return "text";
    case InputFormat::Jsonl: return "jsonl";
    case InputFormat::Fortune: return "fortune";
  }
  return "?";
}

InputFormat parse_input_format(std::string_view name) {
  for (InputFormat f : {InputFormat::Auto, InputFormat::Text, InputFormat::Jsonl, InputFormat::Fortune})
    if (name == input_format_name(f)) return f;
  MT_THROW(ConfigError, "unknown input format '", name, "' (use auto, text, jsonl or fortune)");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_REQUIRE(DataError, in.good(), "cannot read ", path, ": ", std::strerror(errno));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MT_REQUIRE(DataError, !in.bad(), "error reading ", path, ": ", std::strerror(errno));
  return s;
}

InputFormat detect_format(const std::string& path, std::string_view content) {
  if (ends_with(path, ".jsonl")) return InputFormat::Jsonl;
  if (content.starts_with("%\n") || content.find("\n%\n") != std::string_view::npos ||
      content.find("\n%\r\n") != std::string_view::npos)
    return InputFormat::Fortune;
  return InputFormat::Text;
}

std::vector<SourceFile> expand_inputs(const std::vector<std::string>& inputs, InputFormat format) {
  MT_REQUIRE(DataError, !inputs.empty(), "no input paths given");
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    const auto st = fs::status(in, ec);
    MT_REQUIRE(DataError, !ec && fs::exists(st), "input path ", in, " does not exist");
    if (fs::is_directory(st)) {
      const size_t before = files.size();
      expand_directory(in, &files);
      MT_REQUIRE(DataError, files.size() > before, "input directory ", in, " holds no files");
    } else {
      files.push_back(in);
    }
  }
  std::vector<SourceFile> out;
  out.reserve(files.size());
  for (auto& f : files) {
    InputFormat fmt = format;
    if (fmt == InputFormat::Auto) fmt = ends_with(f, ".jsonl") ? InputFormat::Jsonl : detect_format(f, read_file(f));
    out.push_back({std::move(f), fmt});
  }
  return out;
}

int64_t for_each_document(const SourceFile& src, const std::function<void(std::string_view)>& fn) {
  int64_t n = 0;
  auto emit = [&](std::string_view doc) {
    if (blank(doc)) return;
    fn(doc);
    ++n;
  };
  if (src.format == InputFormat::Jsonl) {
    std::ifstream in(src.path, std::ios::binary);
    MT_REQUIRE(DataError, in.good(), "cannot read ", src.path, ": ", std::strerror(errno));
    std::string line;
    for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
      if (blank(line)) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        MT_THROW(DataError, src.path, ":", lineno, ": invalid JSON: ", e.what());
      }
      MT_REQUIRE(DataError, j.is_object() && j.contains("text") && j["text"].is_string(), src.path, ":", lineno,
                 ": expected a JSON object with a string \"text\" field");
      emit(j["text"].get_ref<const std::string&>());
    }
    MT_REQUIRE(DataError, !in.bad(), "error reading ", src.path);
    return n;
  }
  const std::string content = read_file(src.path);
  if (src.format == InputFormat::Text) {
    emit(content);
    return n;
  }
  MT_CHECK(src.format == InputFormat::Fortune, "format not resolved for ", src.path);
  std::string_view rest(content);
  size_t doc_begin = 0, pos = 0;
  while (pos < rest.size()) {
    size_t eol = rest.find('\n', pos);
    const size_t next = eol == std::string_view::npos ? rest.size() : eol + 1;
    std::string_view line = rest.substr(pos, (eol == std::string_view::npos ? rest.size() : eol) - pos);
    if (line == "%" || line == "%\r") {
      emit(rest.substr(doc_begin, pos - doc_begin));
      doc_begin = next;
    }
    pos = next;
  }
  emit(rest.substr(doc_begin));
  return n;
}

}  // namespace meshtrain::data
