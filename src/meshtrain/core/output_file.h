// Writing a file a user names (report --out, timeline --out, a rewritten
// metrics file): never one of the command's own inputs, never an existing
// file without being told to replace it, and never torn. The content goes
// to a fresh temporary file beside the output (mkstemp: a name no existing
// file has, so a user's X.tmp is never touched), is flushed to disk and
// renamed over the output; on any failure the temporary file is removed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

// ConfigError naming `path` when it is a directory, is the same file as one
// of `inputs` (after links), or exists and `replace` is false (the message
// names `replace_flag`, e.g. "--force").
void check_output_file(const std::string& path, const std::vector<std::string>& inputs, bool replace,
                       const char* replace_flag);

// Replaces `path` with `content` atomically (see above); DataError naming
// the file on failure. Creates missing parent directories.
void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace meshtrain
