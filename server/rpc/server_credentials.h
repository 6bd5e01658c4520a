// The gRPC port's transport security (server/core/tls_files.h).
// Thread-safe: a pure function.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/core/tls_files.h"

namespace grpc {
class ServerCredentials;
}

namespace zerostate::server {

// Reads and checks the files (PEM parses, the key matches the certificate)
// and builds the credentials for AddListeningPort. Errors:
// INVALID_ARGUMENT naming the flag: neither TLS files nor --plaintext, both,
// a certificate without a key (or the reverse), a client CA without a
// certificate, a file that cannot be read or parsed, a key that does not
// match the certificate.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsOptions& options);

}  // namespace zerostate::server
