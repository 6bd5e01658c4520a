// The client's transport security from ClientOptions: TLS with a CA file
// (and a client certificate for mutual TLS), or plaintext when asked for
// explicitly. Thread-safe: a pure function.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "grpcpp/security/credentials.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace zerostate::client {

// Reads the PEM files options names and builds the channels' credentials.
// Errors: INVALID_ARGUMENT naming the option: neither tls_ca_file nor
// plaintext, both, tls_cert_file without tls_key_file (or the reverse),
// client files without tls_ca_file, a file that cannot be read, a job_token
// outside 32..256 printable characters.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& options);

// The TCP data plane's TLS context from the same files (common/data_tls.h),
// null for plaintext. Errors: those of ChannelCredentialsFor, and
// INVALID_ARGUMENT when a file does not parse.
[[nodiscard]] absl::StatusOr<std::shared_ptr<SSL_CTX>> DataTlsContextFor(
    const ClientOptions& options);

}  // namespace zerostate::client
