// The transport security both ports of a server share (the gRPC port,
// server/rpc/server_credentials.h; the data plane,
// server/dataplane/data_tls_context.h): TLS with the server's certificate,
// mutual TLS when a client CA is given (clients must present a certificate
// that CA signed), or plaintext only when asked for explicitly; the flags'
// checks and the files' reading, written once for both.
// Thread-safe: pure functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace zerostate::server {

struct TlsOptions {
  std::string cert_file;       // --tls_cert: PEM certificate chain
  std::string key_file;        // --tls_key: PEM private key of the certificate
  std::string client_ca_file;  // --tls_client_ca: PEM CA; set = mutual TLS
  bool plaintext = false;      // --plaintext: no TLS at all
};

// Checks the flags' combination. Errors: INVALID_ARGUMENT naming the
// flag: neither TLS files nor --plaintext, both, a certificate without a
// key (or the reverse), a client CA without a certificate.
[[nodiscard]] absl::Status CheckTlsFlags(const TlsOptions& options);

// The PEM contents of the files of TlsOptions.
struct TlsPem {
  std::string cert, key, ca;  // ca: "" without --tls_client_ca
};

// Reads the TLS files and checks them (PEM parses, the key matches the
// certificate). REQUIRES: CheckTlsFlags OK, not plaintext. Errors:
// INVALID_ARGUMENT naming the flag: a file that cannot be read or parsed,
// a key that does not match the certificate.
[[nodiscard]] absl::StatusOr<TlsPem> ReadTlsFiles(const TlsOptions& options);

// The contents of `path`, for PEM files. Errors: INVALID_ARGUMENT
// "<flag>: cannot read '<path>': <reason>".
[[nodiscard]] absl::StatusOr<std::string> ReadPemFile(const std::string& flag,
                                                      const std::string& path);

}  // namespace zerostate::server
