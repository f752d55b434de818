#include "meshtrain/checkpoint/sha256.h"

#include <openssl/evp.h>

#include "meshtrain/checkpoint/manifest.h"
#include "meshtrain/core/error.h"

namespace meshtrain::checkpoint {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  MT_CHECK(ctx_ && EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1,
           "SHA-256 init failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t n) {
  if (n) MT_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) == 1, "SHA-256 update failed");
}

std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MT_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len) == 1, "SHA-256 final failed");
  static const char* kHex = "0123456789abcdef";
  std::string s(size_t(len) * 2, '0');
  for (unsigned i = 0; i < len; ++i) {
    s[2 * i] = kHex[md[i] >> 4];
    s[2 * i + 1] = kHex[md[i] & 15];
  }
  return s;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex_digest();
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string manifest_digest_line(std::string_view manifest_text) {
  return sha256_hex(manifest_text.data(), manifest_text.size()) + "  " + kManifestFile + "\n";
}

}  // namespace meshtrain::checkpoint
