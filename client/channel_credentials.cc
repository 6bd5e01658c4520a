#include "client/channel_credentials.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/data_tls.h"
#include "common/read_file.h"

namespace zerostate::client {
namespace {

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::StatusOr<std::string> ReadFile(const std::string& field, const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return Invalid(field, std::string(text.status().message()));
  return text;
}

absl::Status CheckChoice(const ClientOptions& o) {
  const bool tls = !o.tls_ca_file.empty() || !o.tls_cert_file.empty() || !o.tls_key_file.empty();
  if (!tls && !o.plaintext) {
    return Invalid("tls_ca_file",
                   "no transport security chosen: set tls_ca_file (and "
                   "tls_cert_file/tls_key_file for mutual TLS), or plaintext");
  }
  if (tls && o.plaintext) return Invalid("plaintext", "set together with tls_* options");
  if (!tls) return absl::OkStatus();
  if (o.tls_ca_file.empty())
    return Invalid("tls_ca_file", "required with tls_cert_file/tls_key_file");
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return Invalid(o.tls_cert_file.empty() ? "tls_cert_file" : "tls_key_file",
                   "tls_cert_file and tls_key_file go together");
  }
  return absl::OkStatus();
}

absl::Status CheckToken(const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  bool printable = true;
  for (char c : token) printable &= c >= '!' && c <= '~';
  if (!printable || token.size() < 32 || token.size() > 256) {
    return Invalid("job_token", absl::StrCat("must be 32 to 256 printable characters without "
                                             "spaces; has ",
                                             token.size(), " characters"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& o) {
  if (auto s = CheckToken(o.job_token); !s.ok()) return s;
  if (auto s = CheckChoice(o); !s.ok()) return s;
  if (o.plaintext) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  auto ca = ReadFile("tls_ca_file", o.tls_ca_file);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  if (!o.tls_cert_file.empty()) {
    auto cert = ReadFile("tls_cert_file", o.tls_cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadFile("tls_key_file", o.tls_key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> DataTlsContextFor(const ClientOptions& o) {
  if (auto s = CheckChoice(o); !s.ok()) return s;
  if (o.plaintext) return nullptr;
  auto ca = ReadFile("tls_ca_file", o.tls_ca_file);
  if (!ca.ok()) return ca.status();
  std::string cert, key;
  if (!o.tls_cert_file.empty()) {
    auto read_cert = ReadFile("tls_cert_file", o.tls_cert_file);
    if (!read_cert.ok()) return read_cert.status();
    auto read_key = ReadFile("tls_key_file", o.tls_key_file);
    if (!read_key.ok()) return read_key.status();
    cert = *std::move(read_cert);
    key = *std::move(read_key);
  }
  return ClientTlsContext(*ca, cert, key, o.data_ktls);
}

}  // namespace zerostate::client
