#include "server/rpc/auth_tls.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/data_tls.h"
#include "common/read_file.h"

namespace zerostate::server {
namespace {

absl::Status Invalid(const std::string& flag, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", what));
}

absl::Status CheckFlags(const TlsOptions& o) {
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

// The PEM contents of the files of TlsOptions.
struct Pem {
  std::string cert, key, ca;  // ca: "" without --tls_client_ca
};

// Reads the TLS files and checks them (parse, key matches certificate).
absl::StatusOr<Pem> ReadAndCheck(const TlsOptions& o) {
  Pem pem;
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

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return Invalid(flag, std::string(text.status().message()));
  return text;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(const TlsOptions& o) {
  if (auto s = CheckFlags(o); !s.ok()) return s;
  if (o.plaintext) return grpc::InsecureServerCredentials();
  if (auto pem = ReadAndCheck(o); !pem.ok()) return pem.status();
  // Checked above, then watched: gRPC reads the files again when they
  // change (looked at every second), so a renewed certificate serves new
  // connections without a restart; a pair that does not match yet keeps
  // the previous one.
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      o.key_file, o.cert_file, o.client_ca_file, /*refresh_interval_sec=*/1);
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (o.client_ca_file.empty()) {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

bool DataTlsContext::Stamp::operator==(const Stamp& o) const {
  for (int i = 0; i < 3; ++i) {
    if (ino[i] != o.ino[i] || size[i] != o.size[i] || mtime[i].tv_sec != o.mtime[i].tv_sec ||
        mtime[i].tv_nsec != o.mtime[i].tv_nsec) {
      return false;
    }
  }
  return true;
}

DataTlsContext::Stamp DataTlsContext::Look() const {
  Stamp stamp;
  const std::string* files[3] = {&options_.cert_file, &options_.key_file, &options_.client_ca_file};
  for (int i = 0; i < 3; ++i) {
    struct stat st {};
    if (files[i]->empty() || stat(files[i]->c_str(), &st) != 0) continue;
    stamp.ino[i] = st.st_ino;
    stamp.size[i] = st.st_size;
    stamp.mtime[i] = st.st_mtim;
  }
  return stamp;
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> DataTlsContext::Make() const {
  auto pem = ReadAndCheck(options_);
  if (!pem.ok()) return pem.status();
  return ServerTlsContext(pem->cert, pem->key, pem->ca, kernel_);
}

absl::StatusOr<std::unique_ptr<DataTlsContext>> DataTlsContext::Load(const TlsOptions& options,
                                                                     bool kernel) {
  if (auto s = CheckFlags(options); !s.ok()) return s;
  std::unique_ptr<DataTlsContext> tls(new DataTlsContext(options, kernel));
  Stamp stamp = tls->Look();
  auto ctx = tls->Make();
  if (!ctx.ok()) return ctx.status();
  absl::MutexLock lock(&tls->mu_);
  tls->current_ = *std::move(ctx);
  tls->stamp_ = stamp;
  tls->looked_ = absl::Now();
  return tls;
}

std::shared_ptr<SSL_CTX> DataTlsContext::Current() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now - looked_ < absl::Seconds(1)) return current_;
  looked_ = now;
  Stamp stamp = Look();
  if (stamp == stamp_) return current_;
  // Loaded under mu_: a renewal is rare, and the connections that come
  // meanwhile should get the new certificate.
  auto ctx = Make();
  if (!ctx.ok()) {
    std::cerr << "zerostate-server: data plane TLS: the certificate files changed but do not "
                 "load; new connections keep the previous ones: "
              << ctx.status() << std::endl;
    return current_;
  }
  stamp_ = stamp;
  current_ = *std::move(ctx);
  ++reloads_;
  std::cerr << "zerostate-server: data plane TLS: certificate files reloaded" << std::endl;
  return current_;
}

}  // namespace zerostate::server
