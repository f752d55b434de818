#include "meshtrain/data/corpus_reader.h"

#include <sys/stat.h>

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

// (device, inode) of a directory, to notice one reached again through a
// symbolic link.
std::pair<dev_t, ino_t> identity(const fs::path& dir) {
  struct stat st {};
  MT_REQUIRE(DataError, ::stat(dir.c_str(), &st) == 0, "cannot read input directory ", dir.string(), ": ",
             std::strerror(errno));
  return {st.st_dev, st.st_ino};
}

void expand_directory(const fs::path& dir, std::vector<std::string>* out,
                      std::vector<std::pair<fs::path, std::pair<dev_t, ino_t>>>& ancestors) {
  const auto id = identity(dir);
  for (const auto& [path, seen] : ancestors)
    MT_REQUIRE(DataError, seen != id, "input directory ", dir.string(), " is ", path.string(),
               " again, reached through a symbolic link (a loop); remove the link or give the files themselves");
  ancestors.push_back({dir, id});
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
    const auto st = fs::status(e, ec);
    MT_REQUIRE(DataError, !ec || ec == std::errc::no_such_file_or_directory, "input ", e.string(), ": ", ec.message(),
               ec == std::errc::too_many_symbolic_link_levels ? " (symbolic links that lead to each other)" : "");
    if (fs::is_directory(st)) {
      expand_directory(e, out, ancestors);
    } else if (fs::is_regular_file(st)) {
      out->push_back(e.string());
    }
  }
  ancestors.pop_back();
}

const char* file_kind(fs::file_type t) {
  switch (t) {
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a pipe";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
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

InputFormat detect_file_format(const std::string& path) {
  if (ends_with(path, ".jsonl")) return InputFormat::Jsonl;
  std::ifstream in(path, std::ios::binary);
  MT_REQUIRE(DataError, in.good(), "cannot read ", path, ": ", std::strerror(errno));
  // Block by block, keeping the last bytes of the previous block: the whole
  // file is never held.
  std::vector<char> block(size_t(1) << 20);
  std::string window;
  for (bool first = true; in.read(block.data(), std::streamsize(block.size())) || in.gcount() > 0; first = false) {
    window.append(block.data(), size_t(in.gcount()));
    if (first && detect_format(path, window) == InputFormat::Fortune) return InputFormat::Fortune;
    if (window.find("\n%\n") != std::string::npos || window.find("\n%\r\n") != std::string::npos)
      return InputFormat::Fortune;
    window.erase(0, window.size() - std::min<size_t>(window.size(), 3));
  }
  MT_REQUIRE(DataError, !in.bad(), "error reading ", path, ": ", std::strerror(errno));
  return InputFormat::Text;
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
    MT_REQUIRE(DataError, !ec || ec == std::errc::no_such_file_or_directory, "input path ", in, ": ", ec.message(),
               ec == std::errc::too_many_symbolic_link_levels ? " (symbolic links that lead to each other)" : "");
    MT_REQUIRE(DataError, fs::exists(st), "input path ", in, " does not exist");
    if (fs::is_directory(st)) {
      const size_t before = files.size();
      std::vector<std::pair<fs::path, std::pair<dev_t, ino_t>>> ancestors;
      expand_directory(in, &files, ancestors);
      MT_REQUIRE(DataError, files.size() > before, "input directory ", in, " holds no files");
    } else {
      // A device or a pipe never ends (/dev/zero) or cannot be read twice.
      MT_REQUIRE(DataError, fs::is_regular_file(st), "input path ", in, " is ", file_kind(st.type()),
                 ", not a file; give text files or directories of them");
      files.push_back(in);
    }
  }
  std::vector<SourceFile> out;
  out.reserve(files.size());
  for (auto& f : files) {
    InputFormat fmt = format;
    if (fmt == InputFormat::Auto) fmt = detect_file_format(f);
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
  if (src.format == InputFormat::Text) {
    emit(read_file(src.path));
    return n;
  }
  MT_CHECK(src.format == InputFormat::Fortune, "format not resolved for ", src.path);
  // Line by line: one document in memory at a time.
  std::ifstream in(src.path, std::ios::binary);
  MT_REQUIRE(DataError, in.good(), "cannot read ", src.path, ": ", std::strerror(errno));
  std::string doc, line;
  while (std::getline(in, line)) {
    if (line == "%" || line == "%\r") {
      emit(doc);
      doc.clear();
      continue;
    }
    doc += line;
    if (!in.eof()) doc += '\n';
  }
  MT_REQUIRE(DataError, !in.bad(), "error reading ", src.path, ": ", std::strerror(errno));
  emit(doc);
  return n;
}

}  // namespace meshtrain::data
