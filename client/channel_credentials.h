// The client's transport security from ClientOptions: TLS with a CA file
// (and a client certificate for mutual TLS), or plaintext when asked for
// explicitly. Thread-safe: a pure function.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "grpcpp/security/credentials.h"

namespace zerostate::client {

// Reads the PEM files options names and builds the channels' credentials.
// Errors: INVALID_ARGUMENT naming the option: neither tls_ca_file nor
// plaintext, both, tls_cert_file without tls_key_file (or the reverse),
// client files without tls_ca_file, a file that cannot be read, a job_token
// outside 32..256 printable characters.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& options);

}  // namespace zerostate::client
