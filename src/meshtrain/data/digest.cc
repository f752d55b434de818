#include "meshtrain/data/digest.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::data {
namespace {

std::string hex_of(const unsigned char* md, unsigned len) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) s += hex[md[i] >> 4], s += hex[md[i] & 15];
  return s;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MT_CHECK(EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) == 1, "EVP sha256 failed");
  return hex_of(md, len);
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_REQUIRE(DataError, in.good(), "cannot read ", path, " for hashing");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  MT_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "EVP sha256 init failed");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), size_t(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return hex_of(md, len);
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

std::string base64_decode(std::string_view text) {
  MT_REQUIRE(DataError, text.size() % 4 == 0, "base64 text of length ", text.size(), " is not a multiple of 4");
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), int(text.size()));
  MT_REQUIRE(DataError, n >= 0, "invalid base64 text");
  // EVP_DecodeBlock counts the '=' padding as zero bytes.
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++pad;
  out.resize(size_t(n) - pad);
  return out;
}

}  // namespace meshtrain::data
