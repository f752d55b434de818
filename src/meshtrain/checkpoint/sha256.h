// Incremental SHA-256 (OpenSSL EVP) and hex helpers for shard digests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain::checkpoint {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  std::string hex_digest();  // finishes; the object must not be updated again

 private:
  void* ctx_;  // EVP_MD_CTX
};

std::string sha256_hex(const void* data, size_t n);
// True for 64 lowercase hex digits.
bool is_sha256_hex(std::string_view s);
// The manifest's digest file (manifest.h): "HEX  manifest.json\n".
std::string manifest_digest_line(std::string_view manifest_text);

}  // namespace meshtrain::checkpoint
