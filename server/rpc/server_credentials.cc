#include "server/rpc/server_credentials.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

namespace zerostate::server {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(const TlsOptions& o) {
  if (auto s = CheckTlsFlags(o); !s.ok()) return s;
  if (o.plaintext) return grpc::InsecureServerCredentials();
  if (auto pem = ReadTlsFiles(o); !pem.ok()) return pem.status();
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

}  // namespace zerostate::server
