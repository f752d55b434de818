// Byte digests and text encodings for self-contained descriptions (a
// SentencePiece model travels inside meta.json and checkpoint metadata as
// base64 with its SHA-256), and the SHA-256 of shards (recorded in
// meta.json by `data prepare`, checked whenever a dataset is opened).
#pragma once

#include <string>
#include <string_view>

namespace meshtrain::data {

std::string sha256_hex(std::string_view bytes);  // lowercase hex
// Lowercase hex SHA-256 of a file's bytes, read in 1 MiB chunks.
std::string sha256_file(const std::string& path);
std::string base64_encode(std::string_view bytes);
// DataError on characters outside the base64 alphabet or a bad length.
std::string base64_decode(std::string_view text);

}  // namespace meshtrain::data
