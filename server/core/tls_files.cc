#include "server/core/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/str_cat.h"
#include "common/read_file.h"

namespace zerostate::server {
namespace {

absl::Status Invalid(const std::string& flag, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", what));
}

// The first OpenSSL error, for messages.
std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// Parses the certificate and the key and checks they belong together.
absl::Status CheckPair(const std::string& cert_pem, const std::string& key_pem) {
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  if (cert == nullptr) return Invalid("--tls_cert", "not a PEM certificate: " + OpenSslError());
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  absl::Status status;
  if (key == nullptr) {
    status = Invalid("--tls_key", "not a PEM private key: " + OpenSslError());
  } else if (X509_check_private_key(cert, key) != 1) {
    ERR_clear_error();
    status = Invalid("--tls_key", "does not match the certificate of --tls_cert");
  }
  EVP_PKEY_free(key);
  X509_free(cert);
  return status;
}

absl::Status CheckCa(const std::string& ca_pem) {
  BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (ca == nullptr) return Invalid("--tls_client_ca", "not a PEM certificate: " + OpenSslError());
  X509_free(ca);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTlsFlags(const TlsOptions& o) {
  const bool tls = !o.cert_file.empty() || !o.key_file.empty() || !o.client_ca_file.empty();
  if (!tls && !o.plaintext) {
    return Invalid("--tls_cert/--tls_key",
                   "no transport security chosen: pass --tls_cert and --tls_key (and "
                   "--tls_client_ca for mutual TLS), or --plaintext to serve without TLS");
  }
  if (tls && o.plaintext) {
    return Invalid("--plaintext", "given together with --tls_* flags; choose one");
  }
  if (!tls) return absl::OkStatus();
  if (o.cert_file.empty()) return Invalid("--tls_cert", "required with --tls_key/--tls_client_ca");
  if (o.key_file.empty()) return Invalid("--tls_key", "required with --tls_cert");
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return Invalid(flag, std::string(text.status().message()));
  return text;
}

absl::StatusOr<TlsPem> ReadTlsFiles(const TlsOptions& o) {
  TlsPem pem;
  auto cert = ReadPemFile("--tls_cert", o.cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadPemFile("--tls_key", o.key_file);
  if (!key.ok()) return key.status();
  if (auto s = CheckPair(*cert, *key); !s.ok()) return s;
  pem.cert = *std::move(cert);
  pem.key = *std::move(key);
  if (!o.client_ca_file.empty()) {
    auto ca = ReadPemFile("--tls_client_ca", o.client_ca_file);
    if (!ca.ok()) return ca.status();
    if (auto s = CheckCa(*ca); !s.ok()) return s;
    pem.ca = *std::move(ca);
  }
  return pem;
}

}  // namespace zerostate::server
