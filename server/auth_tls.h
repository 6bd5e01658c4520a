// Transport security of the gRPC port: TLS with the server's certificate,
// mutual TLS when a client CA is given (clients must present a certificate
// that CA signed), or plaintext only when asked for explicitly.
// Thread-safe: pure functions.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ServerCredentials;
}

namespace zerostate::server {

struct TlsOptions {
  std::string cert_file;       // --tls_cert: PEM certificate chain
  std::string key_file;        // --tls_key: PEM private key of the certificate
  std::string client_ca_file;  // --tls_client_ca: PEM CA; set = mutual TLS
  bool plaintext = false;      // --plaintext: no TLS at all
};

// Reads and checks the files (PEM parses, the key matches the certificate)
// and builds the credentials for AddListeningPort. Errors:
// INVALID_ARGUMENT naming the flag: neither TLS files nor --plaintext, both,
// a certificate without a key (or the reverse), a client CA without a
// certificate, a file that cannot be read or parsed, a key that does not
// match the certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsOptions& options);

// The contents of `path`, for PEM files. Errors: INVALID_ARGUMENT
// "<flag>: cannot read '<path>': <reason>".
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

}  // namespace zerostate::server
