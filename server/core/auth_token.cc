#include "server/core/auth_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace zerostate::server {

absl::StatusOr<std::string> GenerateToken() {
  std::string bytes(32, '\0');
  size_t filled = 0;
  while (filled < bytes.size()) {
    ssize_t n = getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("getrandom: ", strerror(errno)));
    filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(bytes);
}

absl::Status CheckTokenForm(absl::string_view token) {
  bool printable = true;
  for (char c : token) printable &= c >= '!' && c <= '~';
  if (!printable || token.size() < kMinTokenChars || token.size() > kMaxTokenChars) {
    return absl::UnauthenticatedError(
        absl::StrCat(kJobTokenMetadata, ": a token is ", kMinTokenChars, " to ", kMaxTokenChars,
                     " printable characters without spaces; this one has ",
                     printable ? absl::StrCat(token.size(), " characters") : "other characters"));
  }
  return absl::OkStatus();
}

TokenHash HashToken(absl::string_view token) {
  if (token.empty()) return TokenHash();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), digest, &len, EVP_sha256(), nullptr);
  return TokenHash(reinterpret_cast<const char*>(digest), len);
}

bool SameToken(const TokenHash& a, const TokenHash& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace zerostate::server
