// The data plane's two OpenSSL contexts (common/data_tls.h) for mutual TLS
// from the test certificates: the server's ("server", clients "ca" signed)
// and the client's (trusts "ca", presents "client").
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "common/data_tls.h"
#include "tests/testing/test_certificates.h"

namespace zerostate::testing {

struct TlsContexts {
  std::shared_ptr<SSL_CTX> server;
  std::shared_ptr<SSL_CTX> client;
};

// Both contexts, records in the kernel where `kernel` and it has kTLS.
// Errors: those of ServerTlsContext / ClientTlsContext.
inline absl::StatusOr<TlsContexts> MutualTlsContexts(const TestCertificates& certs, bool kernel) {
  auto server = ServerTlsContext(certs.Read("server.pem"), certs.Read("server.key"),
                                 certs.Read("ca.pem"), kernel);
  if (!server.ok()) return server.status();
  auto client = ClientTlsContext(certs.Read("ca.pem"), certs.Read("client.pem"),
                                 certs.Read("client.key"), kernel);
  if (!client.ok()) return client.status();
  return TlsContexts{*std::move(server), *std::move(client)};
}

}  // namespace zerostate::testing
